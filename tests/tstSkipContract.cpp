// The skip contract of the realdata executables (tests/TestUtils.hpp), run by
// skip_contract_test.sh, never by ctest directly: one case that finds no data (skipped) and one
// synthetic case that fails only when KORTEX_TEST_FORCE_FAILURE=1. Without the variable the
// executable must exit 77 (ctest: Skipped); with it, a failure beside a skip, it must exit with
// neither 0 nor 77 (ctest: Failed).
#define BOOST_TEST_MODULE SkipContract
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"

#include <cstdlib>
#include <cstring>

using namespace kortex;

BOOST_AUTO_TEST_CASE(missing_data_is_skipped) {
  if (!test::requireData("kortex-skip-contract/this/path/does/not/exist")) return;
  BOOST_ERROR("requireData found a path that does not exist");
}

BOOST_AUTO_TEST_CASE(synthetic_case_fails_on_demand) {
  const char* force = std::getenv("KORTEX_TEST_FORCE_FAILURE");
  const bool forced = force != nullptr && std::strcmp(force, "1") == 0;
  BOOST_TEST(!forced, "KORTEX_TEST_FORCE_FAILURE=1: this case fails on purpose");
}

KORTEX_REALDATA_TEST_MAIN()
