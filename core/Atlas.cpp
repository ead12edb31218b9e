#include "core/Atlas.hpp"

#include "core/Errors.hpp"

namespace kortex {

void AtlasParams::validate() const { greedy.validate(); }

void AtlasParams::validateFor(Geometry const& g, int subjects) const {
  if (subjects < kMinSubjects)
    throw InvalidArgument("an atlas needs at least " + std::to_string(kMinSubjects) + " subjects, got " +
                          std::to_string(subjects));
  greedy.validateFor(g);
}

}  // namespace kortex
