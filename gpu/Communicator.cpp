#include "gpu/Communicator.hpp"

#include "core/Errors.hpp"

namespace kortex::gpu {

ReductionPath parseReductionPath(std::string const& s) {
  if (s == "auto") return ReductionPath::Auto;
  if (s == "staged") return ReductionPath::HostStaged;
  if (s == "mpi") return ReductionPath::DeviceMpi;
  if (s == "nccl") return ReductionPath::Nccl;
  throw InvalidArgument("unknown reduction path '" + s + "' (auto|staged|mpi|nccl)");
}

const char* toString(ReductionPath r) {
  switch (r) {
    case ReductionPath::Auto: return "auto";
    case ReductionPath::HostStaged: return "staged";
    case ReductionPath::DeviceMpi: return "mpi";
    case ReductionPath::Nccl: return "nccl";
  }
  return "?";
}

}  // namespace kortex::gpu
