// Config layer (DESIGN §6): defaults, parsing of every key, every error class naming the key and
// its file:line, --set overrides, and the to_toml() round trip.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <set>

#include "config/config.h"
#include "config/config_diff.h"
#include "config/config_keys.h"
#include "config/device_emulation.h"
#include "backend/device.h"
#include "core/error.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Failure {
  bool thrown = false;
  std::string what, hint;
};

Failure failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {true, e.what(), e.hint()};
  }
  return {};
}

Failure load_fails(const std::string& text, const std::vector<std::string>& overrides = {},
                   int world_size = 1) {
  return failure_of([&] { load_config_string(text, "x.toml", overrides, world_size); });
}

// Asserts an error whose message starts at `where` and names every string in `names`.
#define EXPECT_CONFIG_ERROR(failure, where, ...)                        \
  do {                                                                  \
    const Failure f_ = (failure);                                       \
    ASSERT_TRUE(f_.thrown) << "expected an error at " << (where);       \
    EXPECT_THAT(f_.what, StartsWith(std::string(where) + ":"));         \
    for (const std::string& n_ : std::vector<std::string>{__VA_ARGS__}) \
      EXPECT_THAT(f_.what, HasSubstr(n_));                              \
    EXPECT_FALSE(f_.hint.empty()) << f_.what;                           \
  } while (0)

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("baton-test-config-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// ---- defaults and parsing -------------------------------------------------------------------

TEST(Config, EmptyFileGivesDefaults) {
  const Config cfg = load_config_string("", "empty.toml");
  EXPECT_EQ(cfg, Config{});
  EXPECT_EQ(cfg.model.kind, ModelKind::GPT);
  EXPECT_EQ(cfg.model.n_layer, 4);
  EXPECT_EQ(cfg.train.global_batch, 32);
  EXPECT_DOUBLE_EQ(cfg.optim.lr, 6e-4);
  EXPECT_EQ(cfg.parallel.schedule, "1f1b");
  EXPECT_EQ(cfg.run.dir, "runs/default");
  EXPECT_EQ(cfg.dp, 1);
  EXPECT_EQ(cfg.micro_batches_per_step(), 4);
  EXPECT_TRUE(cfg.origins.empty());
}

TEST(Config, MissingKeysKeepDefaults) {
  const Config cfg = load_config_string("[model]\nn_layer = 2\n", "x.toml");
  EXPECT_EQ(cfg.model.n_layer, 2);
  EXPECT_EQ(cfg.model.n_head, 4);
  EXPECT_EQ(cfg.train.steps, 1000);
  ASSERT_EQ(cfg.origins.count("model.n_layer"), 1u);
  EXPECT_EQ(cfg.origins.at("model.n_layer").where, "x.toml:2");
}

// Together, kFullConfig (a GPT with AdamW) and kFullImageConfig (a CNN with SGD) set every key of
// the table to a value other than its default (checked below): keys of one model or optimizer kind
// set for the other are errors, so one file cannot hold them all.
const char* kFullConfig = R"(# every GPT / AdamW key, none at its default
[model]
kind = "gpt"
n_layer = 12
n_head = 12
d_model = 768
seq_len = 1024
vocab_size = 50304
dropout = 0.1
init_from = "hf:models/gpt2"

[data]
train = "data/owt/train"
valid = "data/owt/valid"
tokenizer = "data/owt/tok.model"

[train]
steps = 5000
global_batch = 512
micro_batch = 4
seed = 42
log_every = 5
eval_every = 250
eval_steps = 20
spike_factor = 5.0
spike_window = 50
spike_ceiling = 3.0
spike_norm_factor = 20.0
on_spike = "rewind"
max_rewinds = 5

[optim]
kind = "adamw"
lr = 3e-4
min_lr = 3e-5
warmup_steps = 200
decay = "linear"
weight_decay = 0.01
beta1 = 0.8
beta2 = 0.999
eps = 1e-10
grad_clip = 0.5

[parallel]
tp = 2
pp = 2
vp = 2
schedule = "interleaved"
sequence_parallel = true
zero1 = true
recompute = "selective"
scatter_gather = true

[precision]
device = "cuda"
compute = "bf16"
attention = "cudnn"

[checkpoint]
dir = "/ckpt/run1"
every = 1000
keep = 5
resume = "never"

[run]
dir = "runs/gpt2"
stall_timeout_s = 600.0

[hetero]
sync = "wsp"
staleness = 3
cluster = "configs/clusters/mixed.toml"
virtual_workers = ["v100,v100", "rtx:4"]
nm = 4
policy = "hd"
placement = "local"
jitter = 0.25
jitter_span = 4
jitter_scope = "vw"
jitter_probability = 0.3
slowdown = [1, 2.5, 1, 1, 3, 1, 1, 1]
memory_limit = [0, 0.5, 16, 16, 8, 8, 8, 8]
deterministic = true
overlap = false
)";

const char* kFullImageConfig = R"(# the CNN, image-data, SGD and pipeline-layout keys, none at its default
[model]
kind = "vgg"
n_layer = 11
image_size = 28
in_channels = 1
classes = 10
width = 0.5
batch_norm = false

[data]
train = "fm/train-images-idx3-ubyte.gz"
train_labels = "fm/train-labels-idx1-ubyte.gz"
valid = "fm/t10k-images-idx3-ubyte.gz"
valid_labels = "fm/t10k-labels-idx1-ubyte.gz"
augment = "crop_flip"
normalize = false

[optim]
kind = "sgd"
decay = "step"
step_size = 300
step_gamma = 0.5
momentum = 0.5
nesterov = true
weight_decay_mode = "l2"
decay_norm_and_bias = true

[parallel]
pp = 2
schedule = "pipedream"
vertical_sync = true
stages = [[0, 5], [5, 12]]
bucket_mb = 4.5

[run]
trace = true
trace_steps = 5
tensorboard = true
)";

// The keys neither file can set: replicated stages exclude vertical sync and tensor parallelism;
// synthetic images exclude image datasets.
const char* kReplicasConfig = "[parallel]\npp = 2\nschedule = \"pipedream\"\nreplicas = [2, 2]\n";
const char* kSyntheticConfig = "[model]\nkind = \"resnet\"\nn_layer = 50\n[data]\nsynthetic = true\n";
const char* kFolderConfig =
    "[model]\nkind = \"resnet\"\nn_layer = 18\nin_channels = 1\n[data]\nformat = \"image_folder\"\n"
    "train = \"imgs/train\"\nmean = [0.5]\nstd = [0.25]\neval_resize = 240\n";
const char* kGpt2BpeConfig =
    "[data]\ntokenizer = \"gpt2-bpe\"\nvocab_file = \"gpt2/encoder.json\"\nmerge_file = \"gpt2/vocab.bpe\"\n";

TEST(Config, TheFullFilesSetEveryKeyAwayFromItsDefault) {
  // A key at its default proves nothing: each key must be set to another value in some file.
  const Config def;
  std::set<std::string> away;
  for (auto [text, world] : {std::pair{kFullConfig, 8}, {kFullImageConfig, 2}, {kReplicasConfig, 4}, {kSyntheticConfig, 1},
                             {kGpt2BpeConfig, 1}, {kFolderConfig, 1}}) {
    const Config c = load_config_string(text, "full.toml", {}, world);
    for (const config_detail::KeyDesc& k : config_detail::config_keys())
      if (config_detail::format_field(k, c) != config_detail::format_field(k, def)) away.insert(k.full_name());
  }
  for (const config_detail::KeyDesc& k : config_detail::config_keys())
    EXPECT_TRUE(away.count(k.full_name())) << k.full_name() << " is at its default in every full config file";
}

// A CNN's config: GPT keys, images without labels (and the reverse), synthetic images beside
// datasets and tensor parallelism are errors naming the key.
TEST(Config, CnnInconsistenciesAreErrors) {
  const std::string cnn = "[model]\nkind = \"resnet\"\nn_layer = 18\n";
  auto error_of = [&](const std::string& more, int world = 1) {
    try {
      load_config_string(cnn + more, "c.toml", {}, world);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("d_model = 64\n").find("describe a GPT"), std::string::npos);
  EXPECT_NE(error_of("[data]\ntokenizer = \"t.model\"\n").find("describe a GPT"), std::string::npos);
  EXPECT_NE(error_of("[data]\ntrain = \"x.gz\"\n").find("data.train_labels is not set"), std::string::npos);
  // Image folders: labels from folder names; mean / std per channel; IDX keys and folder keys apart.
  const std::string folder = "[data]\nformat = \"image_folder\"\ntrain = \"d\"\n";
  EXPECT_EQ(error_of(folder), "no error");
  EXPECT_NE(error_of(folder + "train_labels = \"y\"\n").find("from the sub-folder names"), std::string::npos);
  EXPECT_NE(error_of(folder + "mean = [0.5]\nstd = [0.5]\n").find("model.in_channels is 3"), std::string::npos);
  EXPECT_NE(error_of(folder + "mean = [0.5, 0.5, 0.5]\n").find("data.std 0"), std::string::npos);
  EXPECT_NE(error_of(folder + "mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0, 0.5]\n").find("data.std holds 0"),
            std::string::npos);
  EXPECT_NE(error_of(folder + "eval_resize = 100\n").find("smaller than the centre crop"), std::string::npos);
  EXPECT_NE(error_of("[data]\ntrain = \"x\"\ntrain_labels = \"y\"\nmean = [0.5]\n").find("data.format"),
            std::string::npos);
  EXPECT_NE(error_of("[data]\ntrain = \"x\"\ntrain_labels = \"y\"\nvalid = \"v\"\n").find("data.valid_labels"),
            std::string::npos);
  EXPECT_NE(error_of("[data]\ntrain_labels = \"y\"\n").find("without the images"), std::string::npos);
  EXPECT_NE(error_of("[data]\nsynthetic = true\ntrain = \"x\"\ntrain_labels = \"y\"\n").find("synthetic"),
            std::string::npos);
  EXPECT_NE(error_of("[parallel]\ntp = 2\n", 2).find("no tensor-parallel layers"), std::string::npos);
  EXPECT_NE(error_of("[parallel]\nrecompute = \"full\"\n").find("keep their activations"), std::string::npos);
  EXPECT_EQ(error_of("[data]\ntrain = \"x\"\ntrain_labels = \"y\"\n"), "no error");
}

TEST(Config, FullImageFileParses) {
  const Config c = load_config_string(kFullImageConfig, "full.toml", {}, 2);
  EXPECT_EQ(c.model.kind, ModelKind::VGG);
  EXPECT_EQ(c.model.image_size, 28);
  EXPECT_EQ(c.model.in_channels, 1);
  EXPECT_EQ(c.model.classes, 10);
  EXPECT_DOUBLE_EQ(c.model.width, 0.5);
  EXPECT_FALSE(c.model.batch_norm);
  EXPECT_EQ(c.data.train_labels, "fm/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(c.data.valid_labels, "fm/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(c.data.augment, "crop_flip");
  EXPECT_FALSE(c.data.normalize);
  EXPECT_EQ(c.optim.decay, "step");
  EXPECT_EQ(c.optim.step_size, 300);
  EXPECT_DOUBLE_EQ(c.optim.step_gamma, 0.5);
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_EQ(c.optim.weight_decay_mode, "l2");
  EXPECT_TRUE(c.optim.decay_norm_and_bias);
  EXPECT_TRUE(c.parallel.vertical_sync);
  EXPECT_EQ(c.parallel.stages, (std::vector<std::vector<int>>{{0, 5}, {5, 12}}));
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 4.5);
  EXPECT_TRUE(c.run.trace);
  EXPECT_EQ(c.run.trace_steps, 5);
  EXPECT_TRUE(c.run.tensorboard);
  const Config back = load_config_string(c.to_toml(), "resolved.toml", {}, 2);
  EXPECT_EQ(back, c);
}

// Keys that would be ignored are errors: an optimizer's keys under the other, image keys for a GPT.
TEST(ConfigErrors, KeysOfAnotherKind) {
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nkind = \"sgd\"\nbeta1 = 0.8\n"), "x.toml:3", "AdamW's");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nnesterov = true\n"), "x.toml:2", "SGD's");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nweight_decay_mode = \"l2\"\n"), "x.toml:2", "decoupled");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\ndecay = \"step\"\n"), "x.toml:2", "step_size");
  EXPECT_CONFIG_ERROR(load_fails("[model]\nclasses = 10\n"), "x.toml:2", "describe CNNs");
  EXPECT_CONFIG_ERROR(load_fails("[data]\naugment = \"crop_flip\"\n"), "x.toml:2", "image datasets");
}

TEST(Config, FullFileParsesEveryKey) {
  const Config c = load_config_string(kFullConfig, "full.toml", {}, /*world_size=*/8);
  EXPECT_EQ(c.model.kind, ModelKind::GPT);
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.model.vocab_size, 50304);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.1);
  EXPECT_EQ(c.data.train, "data/owt/train");
  EXPECT_EQ(c.data.valid, "data/owt/valid");
  EXPECT_EQ(c.data.tokenizer, "data/owt/tok.model");
  EXPECT_EQ(c.train.steps, 5000);
  EXPECT_EQ(c.train.global_batch, 512);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.train.log_every, 5);
  EXPECT_EQ(c.train.eval_every, 250);
  EXPECT_EQ(c.train.eval_steps, 20);
  EXPECT_DOUBLE_EQ(c.train.spike_factor, 5.0);
  EXPECT_EQ(c.train.spike_window, 50);
  EXPECT_DOUBLE_EQ(c.train.spike_ceiling, 3.0);
  EXPECT_DOUBLE_EQ(c.train.spike_norm_factor, 20.0);
  EXPECT_EQ(c.train.on_spike, "rewind");
  EXPECT_EQ(c.train.max_rewinds, 5);
  EXPECT_EQ(c.optim.kind, "adamw");
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optim.min_lr, 3e-5);
  EXPECT_EQ(c.optim.warmup_steps, 200);
  EXPECT_EQ(c.optim.decay, "linear");
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.optim.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-10);
  EXPECT_DOUBLE_EQ(c.optim.grad_clip, 0.5);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.vp, 2);
  EXPECT_EQ(c.parallel.schedule, "interleaved");
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_TRUE(c.parallel.zero1);
  EXPECT_EQ(c.parallel.recompute, "selective");
  EXPECT_TRUE(c.parallel.scatter_gather);
  EXPECT_EQ(c.precision.device, "cuda");
  EXPECT_EQ(c.precision.compute, "bf16");
  EXPECT_EQ(c.checkpoint.dir, "/ckpt/run1");
  EXPECT_EQ(c.checkpoint.every, 1000);
  EXPECT_EQ(c.checkpoint.keep, 5);
  EXPECT_EQ(c.checkpoint.resume, "never");
  EXPECT_EQ(c.run.dir, "runs/gpt2");
  EXPECT_DOUBLE_EQ(c.run.stall_timeout_s, 600.0);
  EXPECT_EQ(c.hetero.sync, SyncMode::WSP);
  EXPECT_EQ(c.hetero.staleness, 3);
  EXPECT_EQ(c.hetero.nm, 4);
  EXPECT_EQ(c.hetero.cluster, "configs/clusters/mixed.toml");
  EXPECT_EQ(c.hetero.virtual_workers, (std::vector<std::string>{"v100,v100", "rtx:4"}));
  EXPECT_EQ(c.hetero.policy, "hd");
  EXPECT_EQ(c.hetero.placement, Placement::LOCAL);
  EXPECT_DOUBLE_EQ(c.hetero.jitter, 0.25);
  EXPECT_EQ(c.hetero.jitter_span, 4);
  EXPECT_EQ(c.hetero.jitter_scope, "vw");
  EXPECT_DOUBLE_EQ(c.hetero.jitter_probability, 0.3);
  EXPECT_EQ(c.hetero.slowdown, (std::vector<double>{1, 2.5, 1, 1, 3, 1, 1, 1}));
  EXPECT_EQ(c.hetero.memory_limit, (std::vector<double>{0, 0.5, 16, 16, 8, 8, 8, 8}));
  EXPECT_TRUE(c.hetero.deterministic);
  EXPECT_FALSE(c.hetero.overlap);
  // Derived: 8 ranks / (tp 2 x pp 2) = dp 2; 512 / 2 / 4 = 64 micro-batches per step.
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.global_batch_per_rank(), 256);
  EXPECT_EQ(c.micro_batches_per_step(), 64);
  EXPECT_EQ(c.checkpoint_dir(), "/ckpt/run1");
}

TEST(Config, IntegerAcceptedWhereFloatExpected) {
  const Config c = load_config_string("[optim]\nlr = 1\nmin_lr = 0\n", "x.toml");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1.0);
  EXPECT_DOUBLE_EQ(c.optim.min_lr, 0.0);
}

TEST(Config, WarmupLongerThanTrainingIsFine) {
  const Config c =
      load_config_string("[train]\nsteps = 10\n[optim]\nwarmup_steps = 100\n", "x.toml");
  EXPECT_EQ(c.optim.warmup_steps, 100);
}

TEST(Config, LoadConfigReadsFileAndRecordsSourcePath) {
  TempDir dir;
  const std::string path = dir.write("a.toml", "[train]\nsteps = 7\n");
  const Config c = load_config(path);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.source_path, path);
  EXPECT_EQ(c.origins.at("train.steps").where, path + ":2");
}

// ---- errors: each names the key and file:line ---------------------------------------------

TEST(ConfigErrors, UnknownKeySuggestsClosest) {
  const Failure f = load_fails("[model]\nn_layer = 2\n\nn_heads = 4\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:4", "unknown key 'model.n_heads'");
  EXPECT_THAT(f.hint, HasSubstr("did you mean 'model.n_head'?"));
}

TEST(ConfigErrors, UnknownKeyFarFromAnyListsSectionKeys) {
  const Failure f = load_fails("[train]\nlearning_schedule = 4\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:2", "train.learning_schedule");
  EXPECT_THAT(f.hint, HasSubstr("global_batch"));
  EXPECT_THAT(f.hint, HasSubstr("eval_steps"));
}

TEST(ConfigErrors, KeyInWrongSectionPointsToItsSection) {
  const Failure f = load_fails("[train]\nsteps = 3\nlr = 1e-3\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "train.lr");
  EXPECT_THAT(f.hint, HasSubstr("optim.lr"));
}

TEST(ConfigErrors, UnknownSection) {
  const Failure f = load_fails("[train]\nsteps = 3\n\n[modle]\nn_layer = 2\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:4", "unknown section [modle]");
  EXPECT_THAT(f.hint, HasSubstr("[model]"));
}

TEST(ConfigErrors, KeyOutsideAnySection) {
  const Failure f = load_fails("steps = 3\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:1", "'steps'");
  EXPECT_THAT(f.hint, HasSubstr("train.steps"));
}

TEST(ConfigErrors, SectionThatIsNotATable) {
  EXPECT_CONFIG_ERROR(load_fails("\nmodel = 3\n"), "x.toml:2", "'model'");
}

TEST(ConfigErrors, WrongType) {
  const Failure f = load_fails("[model]\nn_head = 4\nn_layer = \"4\"\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "model.n_layer must be an integer, got string");
  EXPECT_THAT(f.hint, HasSubstr("n_layer = 4"));
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nlr = \"fast\"\n"), "x.toml:2",
                      "optim.lr must be a number");
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\nzero1 = 1\n"), "x.toml:2",
                      "parallel.zero1 must be a boolean");
  EXPECT_CONFIG_ERROR(load_fails("[run]\ndir = 5\n"), "x.toml:2", "run.dir must be a string");
  EXPECT_CONFIG_ERROR(load_fails("[hetero]\nvirtual_workers = [\"a\", 2]\n"), "x.toml:2",
                      "hetero.virtual_workers must be an array of strings");
  EXPECT_CONFIG_ERROR(load_fails("[hetero]\nvirtual_workers = \"a\"\n"), "x.toml:2",
                      "hetero.virtual_workers must be an array of strings, got string");
}

TEST(ConfigErrors, FloatWhereIntegerExpected) {
  const Failure f = load_fails("[train]\nsteps = 100.0\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:2", "train.steps must be an integer, got float");
  EXPECT_THAT(f.hint, HasSubstr("steps = 100"));
}

TEST(ConfigErrors, IntegerTooLargeForField) {
  EXPECT_CONFIG_ERROR(load_fails("[model]\nn_layer = 10000000000\n"), "x.toml:2", "model.n_layer",
                      "out of range");
  EXPECT_CONFIG_ERROR(load_fails("[train]\nseed = -1\n"), "x.toml:2", "train.seed", "out of range");
}

TEST(ConfigErrors, OutOfRange) {
  const Failure f = load_fails("[model]\nn_layer = 2\ndropout = 1.0\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "model.dropout must be in [0, 1), got 1.0");
  EXPECT_CONFIG_ERROR(load_fails("[model]\n\nn_layer = 0\n"), "x.toml:3",
                      "model.n_layer must be >= 1");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nlr = 0\n"), "x.toml:2", "optim.lr must be > 0");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nbeta2 = 1\n"), "x.toml:2", "optim.beta2");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\neps = 0.0\n"), "x.toml:2", "optim.eps");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nwarmup_steps = -1\n"), "x.toml:2", "optim.warmup_steps");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nweight_decay = -0.1\n"), "x.toml:2",
                      "optim.weight_decay");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\ngrad_clip = -1\n"), "x.toml:2", "optim.grad_clip");
  EXPECT_CONFIG_ERROR(load_fails("[train]\nmicro_batch = 0\n"), "x.toml:2", "train.micro_batch");
  EXPECT_CONFIG_ERROR(load_fails("[train]\neval_every = -1\n"), "x.toml:2", "train.eval_every");
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\npp = 0\n"), "x.toml:2", "parallel.pp");
  EXPECT_CONFIG_ERROR(load_fails("[checkpoint]\nkeep = 0\n"), "x.toml:2", "checkpoint.keep");
  EXPECT_CONFIG_ERROR(load_fails("[hetero]\nstaleness = -2\n"), "x.toml:2", "hetero.staleness");
  EXPECT_CONFIG_ERROR(load_fails("[run]\ndir = \"\"\n"), "x.toml:2", "run.dir must not be empty");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nlr = inf\n"), "x.toml:2",
                      "optim.lr must be a finite number");
}

TEST(ConfigErrors, BadEnumListsAllowedValues) {
  const Failure f = load_fails("[parallel]\npp = 1\nschedule = \"1f1d\"\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "parallel.schedule", "\"1f1d\"");
  EXPECT_THAT(f.hint, HasSubstr("\"interleaved\""));
  EXPECT_THAT(f.hint, HasSubstr("\"zb-h1\""));
  EXPECT_THAT(f.hint, HasSubstr("did you mean \"1f1b\"?"));
  EXPECT_CONFIG_ERROR(load_fails("[model]\nkind = \"bert\"\n"), "x.toml:2", "model.kind");
  EXPECT_CONFIG_ERROR(load_fails("[optim]\ndecay = \"step\"\n"), "x.toml:2", "optim.decay");
  EXPECT_CONFIG_ERROR(load_fails("[precision]\ncompute = \"fp16\"\n"), "x.toml:2",
                      "precision.compute");
  EXPECT_CONFIG_ERROR(load_fails("[hetero]\nsync = \"ssp\"\n"), "x.toml:2", "hetero.sync");
}

// model.kind, hetero.sync and hetero.placement are parsed once into enums: every name of the key
// table parses to its own value, writes back as the same name, and a bad name (a --set bare word
// included) is the key table's error with its suggestions.
TEST(Config, EnumKeysParseOnceAndWriteBack) {
  const std::vector<std::pair<std::string, ModelKind>> kinds = {
      {"gpt", ModelKind::GPT}, {"resnet", ModelKind::RESNET}, {"vgg", ModelKind::VGG}};
  for (const auto& [name, kind] : kinds) {
    EXPECT_EQ(to_string(kind), name);
    EXPECT_EQ(model_kind_named(name), kind);
  }
  EXPECT_FALSE(model_kind_named("bert").has_value());
  for (const auto& [name, sync] : {std::pair{"allreduce", SyncMode::ALLREDUCE}, std::pair{"wsp", SyncMode::WSP}}) {
    const Config c = load_config_string("", "x", {std::string("hetero.sync=") + name}, 1);
    EXPECT_EQ(c.hetero.sync, sync);
    EXPECT_THAT(c.to_toml(), HasSubstr(fmt::format("sync = \"{}\"", name)));
    EXPECT_EQ(load_config_string(c.to_toml(), "resolved"), c);
  }
  const Config local = load_config_string("", "x", {"hetero.placement=local"}, 1);  // a bare word
  EXPECT_EQ(local.hetero.placement, Placement::LOCAL);
  EXPECT_EQ(to_string(Placement::DEFAULT), "default");
  try {
    load_config_string("", "x", {"hetero.placement=locl"}, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("hetero.placement = \"locl\" is not an allowed value"));
    EXPECT_THAT(e.hint(), HasSubstr("did you mean \"local\"?"));
  }
}

TEST(ConfigErrors, HeadsMustDivideModelWidthNamesTheLaterKey) {
  const Failure f = load_fails("[model]\nn_head = 4\nn_layer = 2\nd_model = 250\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:4", "model.n_head", "model.d_model");
  // Same keys the other way round: the error points at n_head, now the later line.
  EXPECT_CONFIG_ERROR(load_fails("[model]\nd_model = 256\n\n\nn_head = 6\n"), "x.toml:5",
                      "model.n_head", "model.d_model");
  // Only n_head set: d_model is the default, the line is n_head's.
  EXPECT_CONFIG_ERROR(load_fails("\n[model]\nn_head = 3\n"), "x.toml:3", "model.n_head");
}

TEST(ConfigErrors, GlobalBatchMustBeMultipleOfMicroBatchTimesDp) {
  const std::string text = "[train]\nmicro_batch = 8\nglobal_batch = 24\n";
  EXPECT_NO_THROW(load_config_string(text, "x.toml", {}, /*world_size=*/1));  // dp 1: 24 = 3 x 8
  const Failure f = load_fails(text, {}, /*world_size=*/2);                   // dp 2: 16 ∤ 24
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "train.global_batch = 24", "train.micro_batch", "16");
  EXPECT_THAT(f.hint, HasSubstr("global_batch = 32"));
}

TEST(ConfigErrors, WorldMustBeMultipleOfTpTimesPp) {
  const Failure f =
      load_fails("[parallel]\ntp = 2\n\npp = 2\n[model]\nn_layer = 4\n", {}, /*world_size=*/6);
  EXPECT_CONFIG_ERROR(f, "x.toml:4", "parallel.tp", "parallel.pp", "6");
  EXPECT_THAT(f.hint, HasSubstr("4, 8, 12"));
}

TEST(ConfigErrors, MinLrAboveLr) {
  const Failure f = load_fails("[optim]\nlr = 1e-4\nwarmup_steps = 3\nmin_lr = 1e-3\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:4", "optim.min_lr", "optim.lr");
}

TEST(ConfigErrors, VirtualStagesNeedInterleaved) {
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\npp = 2\nvp = 2\n"), "x.toml:3", "parallel.vp",
                      "interleaved");
  EXPECT_NO_THROW(load_config_string("[parallel]\npp = 2\nvp = 2\nschedule = \"interleaved\"\n",
                                     "x.toml", {}, 2));
}

TEST(ConfigErrors, VerticalSyncNeedsPipedream) {
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\npp = 2\nvertical_sync = true\n", {}, 2), "x.toml:3",
                      "parallel.vertical_sync", "pipedream");
  EXPECT_NO_THROW(load_config_string(
      "[parallel]\npp = 2\nvertical_sync = true\nschedule = \"pipedream\"\n", "x.toml", {}, 2));
}

// The trainer's other new layout rules, each named at the key that breaks it.
TEST(ConfigErrors, PipelineLayoutRules) {
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\nvp = 2\nschedule = \"interleaved\"\n"), "x.toml:2",
                      "parallel.vp", "parallel.pp = 1");
  EXPECT_CONFIG_ERROR(load_fails("[model]\nn_layer = 3\n[parallel]\npp = 2\n", {}, 2), "x.toml",
                      "n_layer");
  EXPECT_CONFIG_ERROR(load_fails("[train]\nglobal_batch = 24\nmicro_batch = 8\n[parallel]\npp = 2\n"
                                 "vp = 2\nschedule = \"interleaved\"\n", {}, 2),
                      "x.toml", "interleaved", "multiple of");
}

// pipedream's replicated stages (1F1B-RR): the list's own rules, each at the key's line.
TEST(ConfigErrors, ReplicasRules) {
  const std::string pd = "[parallel]\npp = 2\nschedule = \"pipedream\"\n";
  EXPECT_NO_THROW(load_config_string(pd + "replicas = [2, 2]\n", "x.toml", {}, 4));
  EXPECT_CONFIG_ERROR(load_fails("[parallel]\npp = 2\nreplicas = [1, 1]\n", {}, 2), "x.toml:3",
                      "parallel.replicas", "pipedream");
  EXPECT_CONFIG_ERROR(load_fails(pd + "replicas = [2, 1, 2]\n", {}, 5), "x.toml:4",
                      "parallel.replicas", "parallel.pp = 2");
  EXPECT_CONFIG_ERROR(load_fails(pd + "replicas = [2, 1]\n", {}, 3), "x.toml:4", "first stage 2",
                      "last 1");
  EXPECT_CONFIG_ERROR(load_fails(pd + "replicas = [2, 2]\n", {}, 6), "x.toml:4", "4 ranks");
  const Failure bad_type = load_fails(pd + "replicas = [\"a\"]\n", {}, 2);
  EXPECT_TRUE(bad_type.thrown);
  EXPECT_THAT(bad_type.what, HasSubstr("parallel.replicas"));
  // --set takes the list as a bare comma list as well.
  EXPECT_EQ(load_config_string(pd, "x.toml", {"parallel.replicas=2,2"}, 4).parallel.replicas,
            (std::vector<int>{2, 2}));
}

// run.trace_steps bounds run.trace: changed without it, it would do nothing.
TEST(ConfigErrors, TraceStepsWithoutTrace) {
  const Failure f = load_fails("[run]\ntrace_steps = 3\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:2", "run.trace_steps = 3 is set but run.trace = false");
  EXPECT_THAT(f.hint, HasSubstr("set run.trace = true"));
  EXPECT_NO_THROW(load_config_string("[run]\ntrace = true\ntrace_steps = 3\n", "x.toml"));
  EXPECT_NO_THROW(load_config_string("[run]\ntrace_steps = 20\n", "x.toml"));  // the default, as resolved configs list it
}

TEST(ConfigErrors, DefaultsAreLabelled) {
  // d_model comes from the file, n_head from the defaults: the error is at d_model's line.
  EXPECT_CONFIG_ERROR(load_fails("[model]\nd_model = 250\n"), "x.toml:2", "model.d_model");
  // tp set only by --set: a world of 3 is not a multiple of 2.
  EXPECT_CONFIG_ERROR(load_fails("", {"parallel.tp=2"}, 3), "--set", "parallel.tp");
  // Everything default but the world: micro_batch 8 x dp 3 does not divide global_batch 32.
  EXPECT_CONFIG_ERROR(load_fails("", {}, 3), "(default)", "train.global_batch");
}

TEST(ConfigErrors, SyntaxErrorGivesLineAndColumn) {
  const Failure f = load_fails("[model]\nn_layer = 4\nn_head = = 4\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:3", "TOML syntax error");
  EXPECT_THAT(f.what, testing::MatchesRegex("x\\.toml:3:[0-9]+: .*"));
  EXPECT_CONFIG_ERROR(load_fails("[model]\nn_layer = 1\nn_layer = 2\n"), "x.toml:3", "n_layer");
}

TEST(ConfigErrors, MissingFile) {
  const Failure f = failure_of([] { load_config("/nonexistent/baton.toml"); });
  ASSERT_TRUE(f.thrown);
  EXPECT_THAT(f.what, HasSubstr("cannot read config '/nonexistent/baton.toml'"));
  EXPECT_FALSE(f.hint.empty());
  TempDir dir;
  EXPECT_TRUE(failure_of([&] { load_config(dir.path()); }).thrown);  // a directory
}

TEST(ConfigErrors, FileErrorsNameThePath) {
  TempDir dir;
  const std::string path = dir.write("bad.toml", "[model]\nn_layer = 2\n[optim]\nlr = -1.0\n");
  EXPECT_CONFIG_ERROR(failure_of([&] { load_config(path); }), path + ":4", "optim.lr");
}

// ---- --set overrides ------------------------------------------------------------------------

TEST(ConfigOverrides, ValuesParseAsToml) {
  const Config c =
      load_config_string("[train]\nsteps = 100\n", "x.toml",
                         {"train.steps=10", "optim.lr=3e-4", "parallel.zero1=true",
                          "run.dir=runs/x", "hetero.virtual_workers=[\"a\",\"b\"]",
                          "data.train=\"quoted/path\"", "optim.lr=1", "model.dropout=0.25"});
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_DOUBLE_EQ(c.optim.lr, 1.0);  // the last --set wins
  EXPECT_TRUE(c.parallel.zero1);
  EXPECT_EQ(c.run.dir, "runs/x");
  EXPECT_EQ(c.hetero.virtual_workers, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.data.train, "quoted/path");
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.25);
  EXPECT_EQ(c.origins.at("train.steps").where, "--set");
}

TEST(ConfigOverrides, FloatOverride) {
  EXPECT_DOUBLE_EQ(load_config_string("", "x", {"optim.lr=3e-4"}).optim.lr, 3e-4);
}

TEST(ConfigOverrides, NumberLists) {
  // A file's list, a TOML list on the command line, one the shell stripped of brackets and a
  // single number (one rank).
  EXPECT_EQ(load_config_string("[hetero]\nslowdown = [1, 2.5]\n", "x").hetero.slowdown, (std::vector<double>{1, 2.5}));
  EXPECT_EQ(load_config_string("", "x", {"hetero.slowdown=[1, 3]"}).hetero.slowdown, (std::vector<double>{1, 3}));
  EXPECT_EQ(load_config_string("", "x", {"hetero.slowdown=1,3.5"}).hetero.slowdown, (std::vector<double>{1, 3.5}));
  EXPECT_EQ(load_config_string("", "x", {"hetero.slowdown=2"}).hetero.slowdown, (std::vector<double>{2}));
  EXPECT_EQ(load_config_string("", "x", {"hetero.memory_limit=[0.5, 0]"}).hetero.memory_limit,
            (std::vector<double>{0.5, 0}));
  EXPECT_TRUE(load_config_string("", "x", {"hetero.slowdown=[]"}).hetero.slowdown.empty());
  // The resolved config writes floats and reads them back.
  Config c;
  c.hetero.slowdown = {1, 1.0 / 3.0 + 2};
  c.hetero.memory_limit = {0, 0.5};
  EXPECT_THAT(c.to_toml(), HasSubstr("\nslowdown = [1.0, 2.3333333333333335]"));
  EXPECT_EQ(load_config_string(c.to_toml(), "resolved"), c);
}

TEST(ConfigErrors, NumberLists) {
  Failure f = load_fails("[hetero]\nslowdown = [1, 0.5]\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:2", "hetero.slowdown[1] must be >= 1, got 0.5");
  EXPECT_THAT(f.hint, HasSubstr("every entry of hetero.slowdown"));
  EXPECT_CONFIG_ERROR(load_fails("", {"hetero.memory_limit=[1, -2]"}), "--set", "hetero.memory_limit[1] must be >= 0");
  f = load_fails("[hetero]\nslowdown = [1, \"fast\"]\n");
  EXPECT_CONFIG_ERROR(f, "x.toml:2", "hetero.slowdown must be an array of finite numbers", "\"fast\"");
  EXPECT_THAT(f.hint, HasSubstr("slowdown = [1, 2.5]"));
  EXPECT_CONFIG_ERROR(load_fails("[hetero]\nslowdown = 3\n"), "x.toml:2", "hetero.slowdown must be an array of numbers, got integer");
  EXPECT_CONFIG_ERROR(load_fails("", {"hetero.slowdown=1,fast"}), "--set", "an array with a string element \"fast\"");
}

TEST(ConfigOverrides, StringKeysTakeTheTextAsWritten) {
  const Config c = load_config_string(
      "", "x",
      {"run.dir=2024", "data.valid=", "hetero.virtual_workers=[a, b]", "parallel.schedule=zb-h1"});
  EXPECT_EQ(c.run.dir, "2024");
  EXPECT_EQ(c.data.valid, "");
  EXPECT_EQ(c.hetero.virtual_workers,
            (std::vector<std::string>{"a", "b"}));  // shell ate the quotes
  EXPECT_EQ(c.parallel.schedule, "zb-h1");
}

TEST(ConfigOverrides, ErrorsNameSet) {
  Failure f = load_fails("", {"train.stepz=10"});
  EXPECT_CONFIG_ERROR(f, "--set", "unknown key 'train.stepz'");
  EXPECT_THAT(f.hint, HasSubstr("train.steps"));
  EXPECT_CONFIG_ERROR(load_fails("", {"trian.steps=10"}), "--set", "trian");
  EXPECT_CONFIG_ERROR(load_fails("", {"train.steps=abc"}), "--set",
                      "train.steps must be an integer, got string");
  EXPECT_CONFIG_ERROR(load_fails("", {"train.steps=-1"}), "--set", "train.steps must be >= 0");
  EXPECT_CONFIG_ERROR(load_fails("", {"model.init_from=hf1"}), "--set", "model.init_from = \"hf1\" is not \"hf:DIR\"");
  // A number TOML cannot hold is reported as that (it used to read "got string").
  EXPECT_CONFIG_ERROR(load_fails("", {"train.steps=99999999999999999999"}), "--set",
                      "train.steps = 99999999999999999999 is not a number TOML can hold");
  EXPECT_CONFIG_ERROR(load_fails("", {"optim.lr=1e999"}), "--set", "optim.lr = 1e999 is not a number TOML can hold");
  EXPECT_CONFIG_ERROR(load_fails("", {"parallel.zero1=yes"}), "--set", "parallel.zero1");
  EXPECT_CONFIG_ERROR(load_fails("", {"precision.device=gpu"}), "--set", "precision.device");
}

TEST(ConfigOverrides, Malformed) {
  Failure f = load_fails("", {"train.steps"});
  EXPECT_CONFIG_ERROR(f, "--set", "train.steps");
  EXPECT_THAT(f.hint, HasSubstr("section.key=value"));
  f = load_fails("", {"steps=10"});
  EXPECT_CONFIG_ERROR(f, "--set", "steps=10");
  EXPECT_THAT(f.hint, HasSubstr("train.steps=10"));
}

TEST(ConfigOverrides, OverrideFixesABadFileValue) {
  const Config c = load_config_string("[model]\nn_layer = 0\n", "x", {"model.n_layer=3"});
  EXPECT_EQ(c.model.n_layer, 3);
}

TEST(ConfigOverrides, CombinationErrorPointsAtTheOverride) {
  // The file is consistent; the --set makes min_lr > lr, so the error is the override's.
  EXPECT_CONFIG_ERROR(load_fails("[optim]\nlr = 1e-3\nmin_lr = 1e-4\n", {"optim.lr=1e-5"}), "--set",
                      "optim.min_lr", "optim.lr");
}

// ---- to_toml round trip ---------------------------------------------------------------------

TEST(ConfigToToml, DefaultsRoundTrip) {
  const Config d;
  const Config back = load_config_string(d.to_toml(), "resolved.toml");
  EXPECT_EQ(back, d);
}

TEST(ConfigToToml, WritesEveryKeyOfDesignSection6) {
  const std::string text = Config{}.to_toml();
  const std::vector<std::pair<std::string, std::vector<std::string>>> keys = {
      {"model", {"kind", "n_layer", "n_head", "d_model", "seq_len", "vocab_size", "dropout"}},
      {"data", {"train", "valid", "tokenizer"}},
      {"train",
       {"steps", "global_batch", "micro_batch", "seed", "log_every", "eval_every", "eval_steps"}},
      {"optim",
       {"kind", "lr", "min_lr", "warmup_steps", "decay", "weight_decay", "beta1", "beta2", "eps",
        "momentum", "grad_clip"}},
      {"parallel",
       {"tp", "pp", "vp", "schedule", "sequence_parallel", "zero1", "recompute", "scatter_gather"}},
      {"precision", {"device", "compute"}},
      {"checkpoint", {"dir", "every", "keep", "resume"}},
      {"run", {"dir"}},
      {"hetero", {"sync", "staleness", "cluster", "virtual_workers"}},
  };
  size_t last = 0;
  for (const auto& [section, names] : keys) {
    const size_t at = text.find("[" + section + "]\n");
    ASSERT_NE(at, std::string::npos) << section;
    EXPECT_GE(at, last) << section << " out of order";
    last = at;
    for (const std::string& k : names) {
      const size_t key_at = text.find("\n" + k + " = ", at);
      EXPECT_NE(key_at, std::string::npos) << section << "." << k;
    }
  }
  EXPECT_THAT(text, HasSubstr("\nlr = 0.0006"));
  EXPECT_THAT(text, HasSubstr("\ndropout = 0.0"));  // a float stays a float
}

TEST(ConfigToToml, NonDefaultValuesRoundTrip) {
  Config c = load_config_string(kFullConfig, "full.toml", {}, 8);
  c.optim.lr = 3e-4;
  c.optim.min_lr = 1.0 / 3.0 * 1e-4;  // needs all 17 digits
  c.optim.grad_clip = 2;              // integral double must come back as a float
  c.model.dropout = 0.1 + 0.2;
  c.train.seed = 9007199254740993u;  // above 2^53
  c.train.steps = 1234567890123;
  c.run.dir = "runs/with \"quotes\" and \\backslash\\";
  c.data.train = "tab\there\nnewline \x01 ctrl ünïcode";
  c.checkpoint.dir = "";
  c.hetero.virtual_workers = {"a\"b", "c\\d", "", "e"};  // 4 VWs: the batch splits into 4 slices
  const std::string text = c.to_toml();
  EXPECT_THAT(text, HasSubstr("lr = 0.0003"));
  const Config back = load_config_string(text, "resolved.toml", {}, 8);
  EXPECT_EQ(back, c) << text;
  EXPECT_EQ(back.optim.min_lr, c.optim.min_lr);  // bit-exact, not just near
  EXPECT_EQ(back.model.dropout, c.model.dropout);
  EXPECT_EQ(back.run.dir, c.run.dir);
  EXPECT_EQ(back.data.train, c.data.train);
  EXPECT_EQ(back.hetero.virtual_workers, c.hetero.virtual_workers);
}

TEST(ConfigToToml, EqualityComparesSettings) {
  Config a, b;
  EXPECT_EQ(a, b);
  b.parallel.scatter_gather = true;
  EXPECT_NE(a, b);
  b = a;
  b.hetero.virtual_workers = {"x"};
  EXPECT_NE(a, b);
  b = a;
  b.source_path = "elsewhere.toml";  // bookkeeping, not a setting
  EXPECT_EQ(a, b);
}

TEST(ConfigToToml, ResolvedConfigFileLoadsBack) {
  TempDir dir;
  const Config c = load_config_string("[train]\nsteps = 77\n", "x", {"optim.lr=2.5e-4"});
  const std::string path = write_resolved_config(c, dir.path() + "/run");
  const Config back = load_config(path);
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.train.steps, 77);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(ConfigDiff, NamesTheFirstDifferingKeyInTableOrder) {
  const Config a = load_config_string("", "x", {"train.steps=20", "optim.lr=1e-3"});
  const Config b = load_config_string("", "x", {"train.steps=10", "optim.lr=2e-3"});
  EXPECT_EQ(first_config_difference(a.to_toml(), a.to_toml(), "rank 0"), "");
  EXPECT_EQ(first_config_difference(a.to_toml(), b.to_toml(), "rank 0"), "train.steps = 20 here, 10 on rank 0");
  const Config c = load_config_string("", "x", {"train.steps=20", "optim.lr=2e-3"});
  EXPECT_EQ(first_config_difference(a.to_toml(), c.to_toml(), "rank 3"), "optim.lr = 0.001 here, 0.002 on rank 3");
  // A key missing on one side (another baton's key table) is named as that.
  std::string fewer = a.to_toml();
  fewer.erase(fewer.find("steps = "), fewer.find('\n', fewer.find("steps = ")) - fewer.find("steps = ") + 1);
  EXPECT_NE(first_config_difference(a.to_toml(), fewer, "rank 1").find("another baton version?"), std::string::npos);
}

// ---- heterogeneity on one machine (config/device_emulation.h) --------------------------------

Config wsp_config(const std::vector<std::string>& overrides, int world = 2) {
  return load_config_string("[hetero]\nsync = \"wsp\"\n", "x.toml", overrides, world);
}

TEST(DeviceEmulation, SlowdownAndMemoryFromTheNamedDevices) {
  // HetPipe's V and Q: fp32 peaks 15.7 and 5.3 TFLOP/s, 16 and 8 GB.
  const Config c = wsp_config({"hetero.virtual_workers=[\"0@V100\", \"1@P4000\"]"});
  const std::vector<RankEmulation> e = rank_emulation(c, 2);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].device, "V100-SXM2-16GB");
  EXPECT_EQ(e[1].device, "QUADRO-P4000");
  EXPECT_DOUBLE_EQ(e[0].slowdown, 1);
  EXPECT_DOUBLE_EQ(e[1].slowdown, 15.7 / 5.3);
  EXPECT_THAT(e[1].slowdown_from, HasSubstr("fp32"));
  EXPECT_EQ(e[0].memory_limit, size_t{16000000000});
  EXPECT_EQ(e[1].memory_limit, size_t{8000000000});
  check_trainable(c);  // a device named on a one-rank VW trains
}

TEST(DeviceEmulation, GivenListsWinAndUnnamedRanksRunAsThemselves) {
  const Config c = wsp_config({"hetero.virtual_workers=[\"0@V100\", \"1\", \"2\"]", "hetero.slowdown=[1, 3, 1.5]",
                               "hetero.memory_limit=[0, 2, 0.5]", "train.global_batch=48"}, 3);
  const std::vector<RankEmulation> e = rank_emulation(c, 3);
  EXPECT_EQ((std::vector<double>{e[0].slowdown, e[1].slowdown, e[2].slowdown}), (std::vector<double>{1, 3, 1.5}));
  EXPECT_EQ(e[0].memory_limit, 0u);  // 0 = unlimited, even for a named device
  EXPECT_EQ(e[1].memory_limit, size_t{2} << 30);
  EXPECT_EQ(e[2].memory_limit, size_t{1} << 29);
  for (const RankEmulation& r : rank_emulation(wsp_config({}), 2)) {
    EXPECT_EQ(r.slowdown, 1);
    EXPECT_EQ(r.memory_limit, 0u);
    EXPECT_FALSE(r.emulated());
  }
  // Only the devices named set the scale: an unnamed rank is 1, the fastest named one too.
  const std::vector<RankEmulation> m = rank_emulation(wsp_config({"hetero.virtual_workers=[\"0\", \"1@RTX-2060\"]"}), 2);
  EXPECT_DOUBLE_EQ(m[0].slowdown, 1);
  EXPECT_DOUBLE_EQ(m[1].slowdown, 1);
  EXPECT_EQ(m[0].memory_limit, 0u);
}

TEST(DeviceEmulation, Refusals) {
  Failure f = failure_of([] { rank_emulation(wsp_config({"hetero.slowdown=[1, 2, 3]"}), 2); });
  EXPECT_THAT(f.what, HasSubstr("hetero.slowdown has 3 entries but the job has 2 ranks"));
  EXPECT_THAT(f.hint, HasSubstr("give 2 entries"));
  f = failure_of([] { rank_emulation(wsp_config({"hetero.memory_limit=[4]"}), 2); });
  EXPECT_THAT(f.what, HasSubstr("hetero.memory_limit has 1 entry but the job has 2 ranks"));
  f = failure_of([] { rank_emulation(wsp_config({"hetero.virtual_workers=[\"0@V100\", \"1@P4000\"]",
                                                  "precision.compute=bf16"}), 2); });
  EXPECT_THAT(f.what, HasSubstr("rank 0 stands for V100-SXM2-16GB, which has no bf16 peak"));
  EXPECT_THAT(f.hint, HasSubstr("hetero.slowdown"));
  f = failure_of([] { rank_emulation(wsp_config({"hetero.virtual_workers=[\"0@V1000\", \"1\"]"}), 2); });
  EXPECT_TRUE(f.thrown);
  EXPECT_FALSE(f.hint.empty());
  // Outside virtual-worker runs the keys would do nothing: refused.
  for (const char* key : {"hetero.slowdown=[1, 3]", "hetero.memory_limit=[1, 1]", "hetero.jitter=0.5"}) {
    f = failure_of([&] { check_trainable(load_config_string("", "x.toml", {key}, 2)); });
    EXPECT_THAT(f.what, HasSubstr("emulate devices on the ranks of virtual workers")) << key;
    EXPECT_THAT(f.hint, HasSubstr("hetero.virtual_workers")) << key;
  }
  check_trainable(wsp_config({"hetero.jitter=0.5", "hetero.slowdown=[1, 3]"}));
  // A span without jitter would lengthen episodes of nothing: refused.
  f = failure_of([] { check_trainable(wsp_config({"hetero.jitter_span=4"})); });
  EXPECT_THAT(f.what, HasSubstr("hetero.jitter_span = 4 sets how long a jitter factor lasts, but hetero.jitter = 0"));
  EXPECT_THAT(f.hint, HasSubstr("hetero.jitter > 0"));
  check_trainable(wsp_config({"hetero.jitter=0.5", "hetero.jitter_span=4"}));
  f = failure_of([] { load_config_string("", "x.toml", {"hetero.jitter_span=0"}, 2); });
  EXPECT_TRUE(f.thrown);
  // Likewise a scope without jitter; a scope that is neither rank nor vw is an unknown value.
  f = failure_of([] { check_trainable(wsp_config({"hetero.jitter_scope=\"vw\""})); });
  EXPECT_THAT(f.what, HasSubstr("hetero.jitter_scope = \"vw\" sets whose compute a jitter factor slows, but hetero.jitter = 0"));
  check_trainable(wsp_config({"hetero.jitter=0.5", "hetero.jitter_scope=\"vw\""}));
  f = failure_of([] { load_config_string("", "x.toml", {"hetero.jitter_scope=\"node\""}, 2); });
  EXPECT_TRUE(f.thrown);
  EXPECT_THAT(f.what, HasSubstr("hetero.jitter_scope"));
  // A probability without jitter, or outside (0, 1].
  f = failure_of([] { check_trainable(wsp_config({"hetero.jitter_probability=0.2"})); });
  EXPECT_THAT(f.what, HasSubstr("hetero.jitter_probability = 0.2 sets how often a jitter episode straggles, but "
                                "hetero.jitter = 0"));
  EXPECT_THAT(f.hint, HasSubstr("hetero.jitter > 0"));
  check_trainable(wsp_config({"hetero.jitter=2", "hetero.jitter_probability=0.2"}));
  for (const char* bad : {"hetero.jitter_probability=0", "hetero.jitter_probability=1.5"}) {
    f = failure_of([bad] { load_config_string("", "x.toml", {bad}, 2); });
    EXPECT_TRUE(f.thrown) << bad;
    EXPECT_THAT(f.what, HasSubstr("hetero.jitter_probability")) << bad;
  }
}

// precision.attention (issue 20): the three values; a kernel named explicitly is an error with a hint
// wherever it could not take effect -- not a GPT, not bf16, the CPU, a head size the kernel lacks.
TEST(ConfigPrecisionAttention, AcceptedValues) {
  EXPECT_EQ(Config{}.precision.attention, "auto");
  const std::string gpu = "[precision]\ndevice = \"cuda\"\ncompute = \"bf16\"\n";
  for (const char* k : {"auto", "flash", "cudnn"}) {
    const Config c = load_config_string(gpu + "attention = \"" + k + "\"\n", "x.toml");
    EXPECT_EQ(c.precision.attention, k);
    EXPECT_EQ(to_string(parse_attention_kernel(k)), std::string(k));
    EXPECT_EQ(load_config_string(c.to_toml(), "resolved.toml"), c);  // written to the run directory
  }
  // --set reaches it (baton bench / train)
  EXPECT_EQ(load_config_string(gpu, "x.toml", {"precision.attention=cudnn"}).precision.attention, "cudnn");
  // "auto" is fine everywhere, fp32 and the CPU included.
  EXPECT_EQ(load_config_string("[precision]\ndevice = \"cpu\"\nattention = \"auto\"\n", "x.toml")
                .precision.attention,
            "auto");
}

TEST(ConfigPrecisionAttention, ErrorsWithHints) {
  const std::string gpu = "[precision]\ndevice = \"cuda\"\ncompute = \"bf16\"\n";
  const Failure bad = load_fails(gpu + "attention = \"cudnn-sdpa\"\n");
  EXPECT_CONFIG_ERROR(bad, "x.toml:4", "precision.attention");
  EXPECT_THAT(bad.hint, HasSubstr("\"cudnn\""));
  EXPECT_CONFIG_ERROR(load_fails("[precision]\ndevice = \"cuda\"\nattention = \"cudnn\"\n"), "x.toml:3",
                      "precision.compute = \"fp32\"", "bf16");
  EXPECT_CONFIG_ERROR(load_fails("[precision]\ndevice = \"cpu\"\ncompute = \"bf16\"\nattention = \"flash\"\n"),
                      "x.toml:4", "precision.device = \"cpu\"");
  EXPECT_CONFIG_ERROR(load_fails("[model]\nkind = \"resnet\"\n" + gpu + "attention = \"cudnn\"\n"), "x.toml:6",
                      "model.kind = \"resnet\"");
  // Head sizes: 768 / 12 = 64 suits both; 480 / 12 = 40 only cuDNN (a multiple of 8); 540 / 12 = 45
  // neither; 1632 / 12 = 136 is beyond cuDNN's 128.
  const auto heads = [&](int d_model, const char* k) {
    return fmt::format("[model]\nd_model = {}\nn_head = 12\n{}attention = \"{}\"\n", d_model, gpu, k);
  };
  EXPECT_EQ(load_config_string(heads(768, "flash"), "x.toml").precision.attention, "flash");
  EXPECT_EQ(load_config_string(heads(480, "cudnn"), "x.toml").precision.attention, "cudnn");
  EXPECT_CONFIG_ERROR(load_fails(heads(480, "flash")), "x.toml:7", "head size 40");
  EXPECT_CONFIG_ERROR(load_fails(heads(540, "cudnn")), "x.toml:7", "head size 45");
  EXPECT_CONFIG_ERROR(load_fails(heads(1632, "cudnn")), "x.toml:7", "head size 136");
}

// The device is known only when the backend is chosen: "auto" that lands on the CPU refuses a GPU
// kernel there (backend/device.cpp), "auto" attention is fine.
TEST(ConfigPrecisionAttention, CpuBackendRefusesAGpuKernel) {
  for (AttentionKernel k : {AttentionKernel::FLASH, AttentionKernel::CUDNN}) {
    const Failure f = failure_of([&] { choose_backend("cpu", DType::BF16, 0, k); });
    ASSERT_TRUE(f.thrown);
    EXPECT_THAT(f.what, HasSubstr(std::string("precision.attention = \"") + to_string(k) + "\""));
    EXPECT_THAT(f.hint, HasSubstr("precision.attention = \"auto\""));
  }
  EXPECT_EQ(choose_backend("cpu", DType::BF16, 0, AttentionKernel::AUTO).device, "cpu");
  EXPECT_TRUE(failure_of([] { parse_attention_kernel("fa2"); }).thrown);
}

}  // namespace
}  // namespace baton
