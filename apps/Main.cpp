// kortex: one executable, subcommands parsed with CLI11. `kortex <cmd> --help` documents each.
// Errors: one message on stderr ("kortex: error: ..."), non-zero exit, no output file left behind.
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <omp.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "apps/Commands.hpp"
#include "core/Backend.hpp"
#include "io/ImageIO.hpp"
#include "distributed/ProcessGroup.hpp"

namespace {

struct KokkosSession {
  KokkosSession() {
    // Kokkos' OpenMP backend warns when OMP_PROC_BIND is unset; binding is the user's choice.
    setenv("OMP_PROC_BIND", "false", 0);
    Kokkos::initialize();
  }
  ~KokkosSession() { Kokkos::finalize(); }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kortex::app;
  CLI::App app{"kortex: registration, templates and denoising of medical images, on GPUs (Kokkos) and CPUs, "
               "each algorithm checked against an independent Eigen/OpenMP CPU reference.\n"
               "Start with: kortex register greedy --fixed F.nii.gz --moving M.nii.gz --out-warped W.nii.gz "
               "--out-field U.nii.gz --out-affine A.txt"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kortex::versionText());
  int threads = 0;
  app.add_option("--threads", threads, "OpenMP threads for the CPU reference (default: all cores)")
      ->check(CLI::PositiveNumber);
  std::vector<std::string> series;
  app.add_option("--series", series,
                 "SeriesInstanceUID of the DICOM series to read where a folder holds several (repeat for "
                 "several folders); may follow the subcommand");
  // Options of this level (--threads, --series) may also be given after the subcommand.
  app.fallthrough();
  Action action;
  // `kortex --help` lists the commands by task, the users' first (in the order they are added).
  addRegisterCommands(app, action);
  addApplyCommand(app, action);
  addAtlasCommands(app, action);
  addDenoiseCommands(app, action);
  addSurfaceCommands(app, action);
  addValidateCommand(app, action);
  addBenchCommands(app, action);
  addReproduceCommand(app, action);
  addTuneCommand(app, action);
  addInfoCommand(app, action);
  const std::vector<std::pair<const char*, std::vector<const char*>>> groups = {
      {"Register images and build templates", {"register", "apply", "atlas"}},
      {"Denoise images and surfaces", {"denoise", "surface"}},
      {"Check and measure (developers: CPU reference vs Kokkos, the papers' tables, tuning)",
       {"validate", "bench", "reproduce", "tune"}},
      {"This build", {"info"}}};
  for (auto const& [group, names] : groups)
    for (const char* name : names) app.get_subcommand(name)->group(group);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, same shape as every other error.
    std::cerr << "kortex: error: " << e.what() << " (see --help)" << std::endl;
    return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
  }

  if (threads > 0) omp_set_num_threads(threads);
  kortex::io::setDicomSeries(series);

  // Under mpirun: MPI before Kokkos. A rank that fails ends the whole job (MPI_Abort), so the
  // other ranks never wait for it.
  auto& group = kortex::distributed::ProcessGroup::world();
  try {
    KokkosSession session;
    return action ? action() : 0;
  } catch (const std::exception& e) {
    if (group.size() > 1)
      group.abort("kortex: error: rank " + std::to_string(group.rank()) + " of " + std::to_string(group.size()) + ": " + e.what());
    std::cerr << "kortex: error: " << e.what() << std::endl;
    return 1;
  }
}
