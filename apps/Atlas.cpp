// `kortex atlas build`: the unbiased greedy atlas of a cohort (pipeline/Atlas.hpp runAtlasJob),
// as one process or under `mpirun -np K` (one rank per GPU; the ranks split the subjects), with a
// progress bar on rank 0 (iteration, template change, mean RMSE, time, ETA).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "apps/Commands.hpp"
#include "apps/Options.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/Atlas.hpp"
#include "distributed/ProcessGroup.hpp"

namespace fs = std::filesystem;

namespace kortex::app {
namespace {

struct AtlasOptions {
  std::vector<std::string> images, labels;
  std::string list, reference, outTemplate, outFields, outWarped, outSubjectLabels, checkpoint, json, qc;
  std::string backend = "auto";
  GreedyOptions greedy;
  int checkpointEvery = pipeline::AtlasJob{}.checkpointEvery;
  double maxMemoryMiB = 0.0;
  bool noAffine = false, noClip = false, resume = false, quiet = false;
};

int cmdAtlasBuild(AtlasOptions const& o) {
  auto& group = distributed::ProcessGroup::world();
  pipeline::AtlasJob job;
  job.images = o.images;
  job.imageList = o.list;
  job.labels = o.labels;
  job.reference = o.reference;
  job.params.greedy = o.greedy.toParams();
  job.useAffine = !o.noAffine;
  job.clip = !o.noClip;
  job.backend = parseBackend(o.backend);
  job.outTemplate = o.outTemplate;
  job.outFieldsDir = o.outFields;
  job.outSubjectLabelsDir = o.outSubjectLabels;
  job.outWarpedDir = o.outWarped;
  job.outReport = o.json;
  job.outQc = o.qc;
  job.checkpointDir = o.checkpoint;
  job.checkpointEvery = o.checkpointEvery;
  job.resume = o.resume;
  job.maxMemoryMiB = o.maxMemoryMiB;  // the job checks every policy (finite, >= 0; resume needs a checkpoint; ...)

  const bool show = !o.quiet && group.rank() == 0;
  const bool tty = isatty(fileno(stderr)) != 0;
  int total = 0;
  for (int it : job.params.greedy.iterations) total += it;
  int done = 0;
  bool dirty = false;
  job.progress = [&](AtlasIteration const& it) {
    ++done;
    if (!show) return;
    if (!tty && done % 10 != 0 && done != 1 && done != total) return;
    const double eta = done > 0 ? it.seconds / done * (total - done) : 0.0;
    std::ostringstream s;
    s << "  atlas scale " << it.scale + 1 << "/" << job.params.greedy.scales.size() << " (x" << it.factor << ") "
      << std::setw(4) << done << "/" << total << "  change " << std::scientific << std::setprecision(3)
      << it.templateChange << "  RMSE " << it.mismatch << std::fixed << std::setprecision(3) << "  min det "
      << it.minJacobian << "  " << std::setprecision(1) << it.seconds << " s  ETA " << eta << " s";
    if (it.refused) s << "  refused " << it.refused;
    std::cerr << (tty ? "\r" : "") << s.str() << (tty ? "\033[K" : "\n") << std::flush;
    dirty = tty;
  };
  job.subjectDone = [&](int subject, std::string const& what) {
    if (show) std::cerr << (tty ? "\r" : "") << "  subject " << subject + 1 << " " << what << (tty ? "\033[K" : "\n") << std::flush;
    dirty = tty;
  };
  const pipeline::AtlasJobResult r = pipeline::runAtlasJob(job, group.communicator());
  if (dirty) std::cerr << "\n";
  if (group.rank() == 0)
    for (auto const& n : r.notes) std::cerr << "kortex: note: " << n << "\n";
  if (group.rank() == 0) {
    if (!o.quiet) {
      std::cout << "atlas: " << r.subjects << " subjects, " << r.group << ", " << toString(r.backend) << " ("
                << r.executionSpace << ")\n"
                << "  reference grid " << describe(r.referenceGrid) << ", atlas box " << describe(r.atlasGrid) << " ("
                << std::fixed << std::setprecision(1)
                << 100.0 * double(r.atlasGrid.numVoxels()) / double(r.referenceGrid.numVoxels()) << " % of the voxels)"
                << "\n  memory: " << std::setprecision(1) << double(r.memory.perSubject) / 1048576.0 << " MiB per subject on the "
                << (r.backend == Backend::Kokkos ? "device" : "host") << " + " << double(r.memory.shared) / 1048576.0 << " MiB shared"
                << (r.streamed > 0 ? "; " + std::to_string(r.streamed) + " subjects streamed from pinned host memory (" +
                                         std::to_string(std::int64_t(double(r.memory.perStreamedHost) / 1048576.0 + 0.5)) + " MiB each)"
                                   : std::string())
                << "\n"
                << "  " << r.atlas.iterations << " iterations" << (r.atlas.resumedAt ? " (resumed after " + std::to_string(r.atlas.resumedAt) + ")" : "")
                << ", " << r.atlas.refused << " fold refusals, min det Dh " << std::setprecision(3) << r.atlas.minJacobian
                << ", mean displacement RMS " << std::setprecision(4) << r.atlas.meanDisplacementRms << " voxel\n"
                << "  seconds: read " << std::setprecision(2) << r.secondsRead << ", align " << r.secondsPrepare
                << ", atlas " << r.secondsAtlas << " (compute " << r.atlas.secondsCompute << ", sums over ranks "
                << r.atlas.secondsReduce << "), write " << r.secondsWrite << ", total " << r.secondsTotal << "\n"
                << "wrote " << job.outTemplate << "\n";
      if (!job.outQc.empty()) std::cout << "wrote " << job.outQc << "/index.html (the QC report)\n";
    }
  }
  return 0;
}

}  // namespace

void addAtlasCommands(CLI::App& app, Action& action) {
  auto* atlas = app.add_subcommand("atlas", "Unbiased diffeomorphic atlas construction (Joshi et al. 2004, Ha et al. 2010)");
  atlas->require_subcommand(1);
  auto op = std::make_shared<AtlasOptions>();
  AtlasOptions& o = *op;
  auto* b = atlas->add_subcommand(
      "build",
      "Greedy unbiased template of a cohort of 3D images (one process, or under mpirun: one rank per GPU). The "
      "defaults are the atlas paper's (Ha et al.: SSD metric, the schedule below), not `register greedy`'s pairwise "
      "ones (LNCC radius 2, scales 4,2,1, iterations 50,50,100); give --metric lncc --scales 4,2,1 --iterations "
      "50,50,100 for those. The template's folder is made if missing.");
  b->add_option("images", o.images, "The cohort's 3D images (the first is the reference unless --reference)");
  b->add_option("--list", o.list, "A text file with more images, one path per line");
  b->add_option("--reference", o.reference, "Image whose grid and orientation the template takes (default: the first)");
  b->add_option("--out-template", o.outTemplate, "The template (NIfTI, the reference's grid and orientation)")->required();
  b->add_option("--out-fields", o.outFields, "Folder for each subject's displacement fields (ITK/ANTs: world mm, LPS): <name>_field (template grid -> subject) and <name>_inverse_field (subject grid -> template)");
  b->add_option("--out-warped", o.outWarped, "Folder for each subject warped into template space (and its labels)");
  b->add_option("--out-subject-labels", o.outSubjectLabels,
                "Folder for each subject's atlas labels: the template-space majority of the --labels maps carried back "
                "onto the subject's grid through its inverse field (<name>_atlas_labels.nii.gz; label interpolation)");
  b->add_option("--labels", o.labels, "One label map per image, same order (warped into --out-warped)");
  addGreedyOptions(*b, o.greedy);
  addNoAffineFlag(*b, o.noAffine);
  b->add_flag("--no-clip", o.noClip, "Run on the whole grid instead of the subjects' common bounding box");
  b->add_option("--checkpoint", o.checkpoint, "Folder for checkpoints (written atomically)");
  b->add_option("--checkpoint-every", o.checkpointEvery, "Iterations between checkpoints")->capture_default_str();
  b->add_flag("--resume", o.resume, "Resume from the newest checkpoint in --checkpoint");
  b->add_option("--max-memory", o.maxMemoryMiB,
                "Device memory a process may use for its subjects, MiB (default 0: the device's free memory, or the host's); "
                "on a GPU the subjects beyond it are streamed from pinned host memory");
  addBackendOption(*b, o.backend);
  b->add_option("--json", o.json, "Report (grids, memory, history, times) as JSON");
  b->add_option("--qc", o.qc,
                "QC report: a folder with index.html and its pictures (the template, the mean |u| and det J over the "
                "subjects, convergence, the subjects worst first with their edges over the template); docs/qc.md");
  b->add_flag("--quiet", o.quiet, "No progress bar or summary");
  b->callback([op, &action] { action = [op] { return cmdAtlasBuild(*op); }; });
}

}  // namespace kortex::app
