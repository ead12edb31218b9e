#include <nlohmann/json.hpp>

#include <iostream>

#include <CLI/CLI.hpp>

#include <memory>

#include "apps/Commands.hpp"
#include "core/Backend.hpp"
#include "core/Boundary.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "validation/Report.hpp"

namespace kortex::app {

int cmdInfo(std::string const& jsonPath) {
  const BuildInfo b = buildInfo();
  std::cout << "Kortex " << b.kortexVersion << " (git " << b.gitHash << ", " << b.buildType
            << ", " << b.compiler << ")\n"
            << "Kokkos " << b.kokkosVersion << ", execution spaces:";
  for (auto const& s : b.executionSpaces) std::cout << " " << s;
  std::cout << " (default " << b.defaultExecutionSpace << ")\n"
            << "GPU backend: " << (kokkosHasGpuBackend() ? "yes" : "no")
            << "; --backend auto selects "
            << (resolve(Backend::Auto) == Backend::Kokkos ? "Kokkos" : "the OpenMP CPU reference")
            << "\n"
            << "Device: " << b.device << "\n"
            << "CPU: " << cpuModel() << ", OpenMP threads (CPU reference): " << b.hostThreads
            << ", Kokkos host concurrency: " << b.kokkosHostConcurrency << "\n"
            << "Image I/O: NIfTI-1/-2 (.nii .nii.gz, .hdr/.img pairs; nifti_clib), DICOM (.dcm and folders of slices, read; "
            << (std::string(io::dicomDecoder()) == "gdcm" ? "GDCM: every transfer syntax it decodes"
                                                          : "Kortex's reader: uncompressed little endian")
            << ")"
            << (b.vtkIo ? ", MetaImage, VTI, PNG, JPEG (VTK)"
                        : "; no VTK: no MetaImage, VTI, PNG, JPEG")
            << "\n"
            << "Boundary rule: " << kBoundaryRuleName << "\n\n"
            << "Kokkos configuration:\n"
            << kokkosConfiguration();
  if (!jsonPath.empty()) {
    nlohmann::json j = io::environmentJson(true);  // the same record reports carry
    j["gpu_backend"] = kokkosHasGpuBackend();
    io::writeTextFileAtomic(jsonPath, j.dump(2) + "\n");
  }
  return 0;
}

void addInfoCommand(CLI::App& app, Action& action) {
  auto* info = app.add_subcommand("info", "Backends, devices and the Kokkos configuration");
  auto json = std::make_shared<std::string>();
  info->add_option("--json", *json, "Also write the description as JSON");
  info->callback([json, &action] { action = [json] { return cmdInfo(*json); }; });
}

}  // namespace kortex::app
