// The SPANK plugin without Slurm: its parsers (option value, plugstack.conf arguments, the
// step's command line, SLURM_TASKS_PER_NODE) on good, bad, overlong and random input; the
// layout decision against the layout chooser; and the built spank_axonn.so's exported symbols
// and libraries.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "layout/layout_search.hpp"
#include "process_helpers.hpp"
#include "plugins/spank/layout_decision.hpp"
#include "plugins/spank/spank_options.hpp"

namespace axonn::spank {
namespace {

using test::contains;

// The message of the SpankError that `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const SpankError& e) {
    return e.what();
  }
  return "";
}

bool printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

PluginConfig plugstack(std::vector<const char*> args) {
  return parse_plugstack_args(static_cast<int>(args.size()), args.data());
}

// ---- --axonn-layout values ----

TEST(SpankOptions, ModesAndLayouts) {
  EXPECT_EQ(parse_layout_option("auto").mode, Mode::automatic);
  EXPECT_EQ(parse_layout_option("validate").mode, Mode::validate);
  EXPECT_EQ(parse_layout_option("off").mode, Mode::off);
  const LayoutRequest r = parse_layout_option("2x2x1x3");
  EXPECT_EQ(r.mode, Mode::explicit_layout);
  EXPECT_EQ(r.text, "2x2x1x3");
  EXPECT_EQ(format_layout_with_order(r.layout), "2x2x1x3:xyzd");
  EXPECT_EQ(format_layout_with_order(parse_layout_option("2x2x1x1:yxzd").layout), "2x2x1x1:yxzd");
  // The largest step the plugin handles, exactly.
  EXPECT_EQ(parse_layout_option("1024x1024x1x1").layout.world(), kMaxTasks);
  // Expert parallelism, with and without an order.
  const LayoutRequest experts = parse_layout_option("8x1x1x1e4");
  EXPECT_EQ(experts.mode, Mode::explicit_layout);
  EXPECT_EQ(experts.text, "8x1x1x1e4");
  EXPECT_EQ(experts.layout.experts, 4);
  EXPECT_EQ(format_layout_with_order(experts.layout), "8x1x1x1e4:xyzd");
  EXPECT_EQ(format_layout_with_order(parse_layout_option("4x2x1x1e2:yxzd").layout), "4x2x1x1e2:yxzd");
  EXPECT_EQ(parse_layout_text("1024x1024x1x1e1024", "t").experts, 1024);
}

TEST(SpankOptions, BadValuesNameTheValueAndTheForm) {
  struct Case {
    std::string value, expect;
  };
  const std::vector<Case> cases = {
      {"", "not a mode or a layout"},
      {"Auto", "not a mode or a layout"},
      {"explicit", "not a mode or a layout"},
      {"2x2", "has 2 sizes, not four"},
      {"2x2x1x1x1", "has 5 sizes, not four"},
      {"0x1x1x1", "'0' is not a size"},
      {"2xx1x1", "'' is not a size"},
      {"+2x1x1x1", "not a mode or a layout"},
      {" 2x1x1x1", "not a mode or a layout"},
      {"2x1x1x1 ", "character other than digits"},
      {"2x1x1x1;rm", "character other than digits"},
      {"2x1x1x1:xyz", "axis order 'xyz'"},
      {"2x1x1x1:xyzz", "axis order 'xyzz'"},
      {"2x1x1x1:", "axis order ''"},
      {"12345678x1x1x1", "'12345678' is not a size"},
      {"1048577x1x1x1", "'1048577' is not a size"},
      {"1024x1024x2x1", "more than 1048576 ranks"},
      {std::string(65, '1'), "longer than 64 characters"},
      {"4x1x1x1e3", "expert parallelism 3 does not divide the data axis 4"},
      {"4x1x1x1e0", "'0' after 'e' is not an expert parallelism in [1, 1048576]"},
      {"4x1x1x1e", "'' after 'e' is not an expert parallelism"},
      {"4x1x1x1ex", "'x' after 'e' is not an expert parallelism"},
      {"4e2x1x1x1", "'2x1x1x1' after 'e' is not an expert parallelism"},
      {"4x1x1x1e2e2", "'2e2' after 'e' is not an expert parallelism"},
      {"4x1x1x1e12345678", "'12345678' after 'e' is not an expert parallelism"},
      {"4x1x1x1e2:xyz", "axis order 'xyz'"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { parse_layout_option(c.value); });
    EXPECT_TRUE(contains(e, c.expect)) << "value '" << c.value << "': " << e;
    EXPECT_TRUE(printable(e)) << e;
  }
  // Every layout error shows the expected form.
  EXPECT_TRUE(contains(error_of([] { parse_layout_option("2x2"); }), "DxXxYxZ[eN][:ORDER]"));
}

TEST(SpankOptions, LayoutTextNamesItsSource) {
  const std::string e = error_of([] { parse_layout_text("4x1", "AXONN_LAYOUT"); });
  EXPECT_TRUE(contains(e, "AXONN_LAYOUT '4x1' has 2 sizes")) << e;
  EXPECT_TRUE(contains(error_of([] { parse_layout_text("", "AXONN_LAYOUT"); }), "AXONN_LAYOUT is empty"));
  // Non-printable bytes never reach a message as they are.
  const std::string nasty = error_of([] { parse_layout_text(std::string("2x\x1b[31m1\n"), "X"); });
  EXPECT_FALSE(nasty.empty());
  EXPECT_TRUE(printable(nasty)) << nasty;
}

// ---- plugstack.conf arguments ----

TEST(SpankOptions, PlugstackDefaults) {
  const PluginConfig c = plugstack({"site_config=/etc/axonn/site.toml"});
  EXPECT_EQ(c.site_config, "/etc/axonn/site.toml");
  EXPECT_EQ(c.default_mode, Mode::off);
  EXPECT_EQ(c.allowed, (std::set<Mode>{Mode::automatic, Mode::validate, Mode::explicit_layout}));
}

TEST(SpankOptions, PlugstackAllKeys) {
  const PluginConfig c = plugstack({"default=auto", "allowed=auto,explicit", "site_config=/s.toml"});
  EXPECT_EQ(c.default_mode, Mode::automatic);
  EXPECT_EQ(c.allowed, (std::set<Mode>{Mode::automatic, Mode::explicit_layout}));
}

TEST(SpankOptions, PlugstackErrorsNameTheArgument) {
  struct Case {
    std::vector<const char*> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{}, "needs site_config=PATH"},
      {{"default=auto"}, "needs site_config=PATH"},
      {{"site_config=/s.toml", "bogus=1"}, "'bogus=1' is not a known key=value"},
      {{"site_config=/s.toml", "verbose"}, "'verbose' is not a known key=value"},
      {{"site_config=/s.toml", "site_config=/t.toml"}, "site_config is given twice"},
      {{"site_config=site.toml"}, "must be an absolute path"},
      {{"site_config="}, "must be an absolute path"},
      {{"site_config=/a b.toml"}, "must be an absolute path"},
      {{"site_config=/s.toml", "default=validate"}, "default must be auto or off"},
      {{"site_config=/s.toml", "allowed=auto,bogus"}, "'bogus' is not a mode"},
      {{"site_config=/s.toml", "allowed="}, "'' is not a mode"},
      {{"site_config=/s.toml", "allowed=off"}, "'off' is not a mode"},
      {{"site_config=/s.toml", "default=auto", "allowed=validate"}, "default=auto but allowed=validate"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { plugstack(c.args); });
    EXPECT_TRUE(contains(e, c.expect)) << e;
    EXPECT_TRUE(contains(e, "plugstack.conf")) << e;
  }
  const std::string long_path = "site_config=/" + std::string(kMaxPathLength, 'a');
  EXPECT_TRUE(contains(error_of([&] { plugstack({long_path.c_str()}); }), "at most 4095"));
  std::vector<const char*> many(kMaxPlugstackArgs + 1, "default=off");
  EXPECT_TRUE(contains(error_of([&] { plugstack(many); }), "at most 16 arguments"));
  EXPECT_TRUE(contains(error_of([] { plugstack({"site_config=/s.toml", nullptr}); }), "argument 2 is missing"));
}

TEST(SpankOptions, ForbiddenModeNamesModeAndAllowed) {
  const PluginConfig c = plugstack({"site_config=/s.toml", "allowed=auto,explicit"});
  const std::string e = error_of([&] { check_mode_allowed(c, Mode::validate, "validate"); });
  EXPECT_TRUE(
      contains(e, "--axonn-layout=validate: mode validate is not allowed on this site (allowed: auto, explicit)"))
      << e;
  EXPECT_EQ(error_of([&] { check_mode_allowed(c, Mode::automatic, "auto"); }), "");
  EXPECT_EQ(error_of([&] { check_mode_allowed(c, Mode::off, "off"); }), "");  // opting out is always allowed
  const PluginConfig only_auto = plugstack({"site_config=/s.toml", "allowed=auto"});
  EXPECT_TRUE(contains(error_of([&] { check_mode_allowed(only_auto, Mode::explicit_layout, "2x1x1x1"); }),
                       "mode explicit is not allowed on this site (allowed: auto)"));
}

// ---- the step's command line ----

TEST(SpankOptions, FindsTheFirstJobTomlAndItsOverrides) {
  const char* argv[] = {"axonn",         "train",          "training.steps=5",
                        "jobs/gpt.toml", "other.toml",     "training.micro_batch=2",
                        "--resume",      "model.layers=4", "x=1",
                        "a.b.c",         ".toml"};
  const auto job = find_job_toml(static_cast<int>(std::size(argv)), argv);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->toml, "jobs/gpt.toml");
  EXPECT_EQ(job->overrides, (std::vector<std::string>{"training.micro_batch=2", "model.layers=4"}));
  EXPECT_TRUE(job->axonn_train);
  // Only `axonn train`, wherever axonn is, tells the plugin every task will load the file.
  for (const auto& [program, subcommand, trains] :
       {std::tuple{"/opt/axonn/bin/axonn", "train", true}, std::tuple{"axonn", "selftest", false},
        std::tuple{"python3", "train", false}, std::tuple{"/bin/not-axonn", "train", false}}) {
    const char* command[] = {program, subcommand, "job.toml"};
    const auto found = find_job_toml(3, command);
    ASSERT_TRUE(found) << program;
    EXPECT_EQ(found->axonn_train, trains) << program << " " << subcommand;
  }
  const char* bare[] = {"job.toml"};
  EXPECT_FALSE(find_job_toml(1, bare)->axonn_train);

  const char* none[] = {"axonn", "selftest", ".toml", "notes.tomlx"};
  EXPECT_FALSE(find_job_toml(static_cast<int>(std::size(none)), none));
  EXPECT_FALSE(find_job_toml(0, nullptr));
  const std::string huge = std::string(kMaxPathLength + 1, 'a') + ".toml";
  const char* too_long[] = {huge.c_str()};
  EXPECT_FALSE(find_job_toml(1, too_long));
}

// ---- SLURM_TASKS_PER_NODE ----

TEST(SpankOptions, TasksPerNode) {
  const TasksPerNode one = parse_tasks_per_node("4");
  EXPECT_EQ(one.nodes, 1);
  EXPECT_EQ(one.tasks, 4);
  EXPECT_EQ(one.uniform, 4);
  const TasksPerNode even = parse_tasks_per_node("2(x3)");
  EXPECT_EQ(even.nodes, 3);
  EXPECT_EQ(even.tasks, 6);
  EXPECT_EQ(even.uniform, 2);
  const TasksPerNode uneven = parse_tasks_per_node("2(x3),1");
  EXPECT_EQ(uneven.nodes, 4);
  EXPECT_EQ(uneven.tasks, 7);
  EXPECT_EQ(uneven.uniform, 0);
  EXPECT_EQ(parse_tasks_per_node("2,2").uniform, 2);
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "a", "2,,1", "2(x3)1", "1048576,1", "1(x1048576),1", "-1"}) {
    const std::string e = error_of([&] { parse_tasks_per_node(bad); });
    EXPECT_TRUE(contains(e, "SLURM_TASKS_PER_NODE")) << "'" << bad << "': " << e;
  }
}

TEST(SpankOptions, SanitizeLine) {
  EXPECT_EQ(sanitize_line("a\tb\nc\x7f"), "a?b?c?");
  EXPECT_EQ(sanitize_line(std::string(2000, 'a')).size(), kMaxOriginLength);
}

// Deterministic random and garbage input through every parser: each one returns or throws
// SpankError, never anything else; what it accepts is within the bounds; every message is one
// printable line. (tests/fuzz/fuzz_spank_options.cpp runs the same properties under libFuzzer.)
TEST(SpankOptions, RandomInputStaysInBounds) {
  std::mt19937 rng(20240611);
  const std::string alphabet = "0123456789xyzd:(),.=/ aotuvlidefTOML\t\n\x01\xff";
  const std::vector<std::string> seeds = {
      "2x2x1x1",       "2x2x1x1:yxzd",        "4x2x1x1e2:yxzd",        "auto",     "validate", "2(x3),1",
      "1024x1024x1x1", "site_config=/s.toml", "allowed=auto,explicit", "job.toml", "a.b=c"};
  int accepted_layouts = 0, accepted_tpn = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s;
    if (i % 2 == 0) {
      s = seeds[rng() % seeds.size()];
      for (int m = static_cast<int>(rng() % 4); m > 0; --m) {  // 0-3 mutations: replace, insert, erase
        const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            if (at < s.size()) s[at] = c;
            break;
          case 1:
            s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c);
            break;
          default:
            if (at < s.size()) s.erase(at, 1);
        }
      }
    } else {
      s.resize(rng() % 200);
      for (char& c : s) c = i % 4 == 1 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng() % 256);
    }
    const auto check_message = [&](const SpankError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(printable(m)) << "input '" << sanitize_line(s) << "': " << sanitize_line(m);
      EXPECT_LT(m.size(), 1200u) << sanitize_line(s);
    };
    try {
      const Layout l = parse_layout_text(s, "input");
      ++accepted_layouts;
      EXPECT_LE(s.size(), kMaxOptionLength);
      EXPECT_GE(std::min({l.data, l.x, l.y, l.z}), 1);
      EXPECT_LE(static_cast<int64_t>(l.data) * l.x * l.y * l.z, kMaxTasks);
      EXPECT_EQ(parse_layout_text(format_layout_with_order(l), "again"), l);
    } catch (const SpankError& e) {
      check_message(e);
    }
    try {
      parse_layout_option(s);
    } catch (const SpankError& e) {
      check_message(e);
    }
    try {
      const TasksPerNode t = parse_tasks_per_node(s);
      ++accepted_tpn;
      EXPECT_GE(t.nodes, 1);
      EXPECT_LE(t.nodes, t.tasks);
      EXPECT_LE(t.tasks, kMaxTasks);
    } catch (const SpankError& e) {
      check_message(e);
    }
    const char* args[] = {s.c_str(), "site_config=/s.toml"};
    try {
      const PluginConfig c = parse_plugstack_args(2, args);
      EXPECT_EQ(c.site_config[0], '/');
    } catch (const SpankError& e) {
      check_message(e);
    }
    const char* argv[] = {"axonn", s.c_str(), "x.toml"};
    const auto job = find_job_toml(3, argv);
    ASSERT_TRUE(job);  // x.toml, if nothing earlier ends in .toml
    EXPECT_TRUE(job->toml == "x.toml" || job->toml == std::string(s.c_str()));
    EXPECT_LE(sanitize_line(s).size(), kMaxOriginLength);
  }
  // The mutations keep some inputs valid, so acceptance is exercised too.
  EXPECT_GT(accepted_layouts, 100);
  EXPECT_GT(accepted_tpn, 30);
}

// ---- the layout decision ----

class SpankDecision : public ::testing::Test {
 protected:
  SiteConfig site_ = load_site_config(test::kSourceDir + "/site_configs/laptop-cpu.toml");
  JobInput job_{"tiny.toml", load_job_config(test::kSourceDir + "/job_templates/tiny.toml", site_)};

  static StepShape step(int tasks, int nodes) { return {tasks, nodes, tasks % nodes ? 0 : tasks / nodes, {}}; }
  static LayoutRequest request(const std::string& value) { return parse_layout_option(value); }
  SiteConfig site_with(const std::string& policy) {
    return load_site_config_string("[site]\nname = \"strict\"\n[node]\ngpus_per_node = 8\n[policy]\n" + policy,
                                   "strict.toml");
  }
};

TEST_F(SpankDecision, WrongProductNamesLayoutTasksAndAlternative) {
  const std::string e = error_of([&] { decide_layout(request("3x1x1x1"), step(4, 1), site_, nullptr, std::nullopt); });
  EXPECT_TRUE(contains(e, "--axonn-layout=3x1x1x1 has 3 ranks")) << e;
  EXPECT_TRUE(contains(e, "the step has 4 tasks")) << e;
  EXPECT_TRUE(contains(e, "use --axonn-layout=4x1x1x1 or --axonn-layout=auto")) << e;
  // The alternative keeps the requested tensor-parallel sizes when they divide the tasks.
  const std::string keep =
      error_of([&] { decide_layout(request("1x2x2x1:yxzd"), step(8, 2), site_, nullptr, std::nullopt); });
  EXPECT_TRUE(contains(keep, "use --axonn-layout=2x2x2x1:yxzd or")) << keep;
  // With a job, the alternative is one the job runs at.
  const std::string with_job =
      error_of([&] { decide_layout(request("1x2x2x1"), step(6, 1), site_, &job_, std::nullopt); });
  const ChooserResult best = choose_layout(chooser_input(site_, job_.config, 1, 6));
  ASSERT_TRUE(best.fits());
  const Layout& b = best.best().layout;
  const std::string alt = b.order == Layout{}.order ? format_layout(b) : format_layout_with_order(b);
  EXPECT_TRUE(contains(with_job, "the step has 6 tasks; use --axonn-layout=" + alt + " or")) << with_job;
}

TEST_F(SpankDecision, ExplicitLayoutCheckedAgainstTheModel) {
  // hidden = 64 is not divisible by G_x*G_z = 3.
  const std::string e = error_of([&] { decide_layout(request("1x3x1x1"), step(3, 1), site_, &job_, std::nullopt); });
  EXPECT_TRUE(contains(e, "--axonn-layout=1x3x1x1 cannot run job tiny.toml with 3 tasks")) << e;
  EXPECT_TRUE(contains(e, "hidden=64")) << e;
  EXPECT_TRUE(contains(e, "use --axonn-layout=3x1x1x1")) << e;
  const Decision d = decide_layout(request("2x2x1x1:yxzd"), step(4, 1), site_, &job_, std::nullopt);
  EXPECT_EQ(format_layout_with_order(d.layout), "2x2x1x1:yxzd");
  EXPECT_TRUE(contains(d.summary, "--axonn-layout=2x2x1x1:yxzd gives 2x2x1x1:yxzd for 4 tasks on 1 node")) << d.summary;
  EXPECT_TRUE(contains(d.summary, "job tiny.toml")) << d.summary;
}

// The expert part of a layout is checked against the job's model in every mode that takes a
// layout: explicit, validate, and the user's AXONN_LAYOUT beside auto.
TEST_F(SpankDecision, ExpertParallelismCheckedAgainstTheModelInEveryMode) {
  const std::string dense_fix =
      "e4 asks for expert parallelism 4 but the model is dense; set model.experts or drop 'e4'";
  const std::string explicit_dense =
      error_of([&] { decide_layout(request("4x1x1x1e4"), step(4, 1), site_, &job_, std::nullopt); });
  EXPECT_TRUE(contains(explicit_dense, "--axonn-layout=4x1x1x1e4 cannot run job tiny.toml with 4 tasks: " + dense_fix))
      << explicit_dense;
  // The alternative offered runs the job: the chooser's, without expert parallelism.
  EXPECT_TRUE(contains(explicit_dense, "; use --axonn-layout=")) << explicit_dense;
  EXPECT_FALSE(contains(explicit_dense.substr(explicit_dense.find("; use")), "e4")) << explicit_dense;
  const std::string validate_dense =
      error_of([&] { decide_layout(request("validate"), step(4, 1), site_, &job_, std::string("4x1x1x1e4")); });
  EXPECT_TRUE(contains(validate_dense, "AXONN_LAYOUT=4x1x1x1e4 cannot run job tiny.toml with 4 tasks: " + dense_fix))
      << validate_dense;
  const std::string env_dense =
      error_of([&] { decide_layout(request("auto"), step(4, 1), site_, &job_, std::string("4x1x1x1e4:yxzd")); });
  EXPECT_TRUE(contains(env_dense, "AXONN_LAYOUT=4x1x1x1e4:yxzd (from your environment) cannot run job tiny.toml"))
      << env_dense;
  EXPECT_TRUE(contains(env_dense, dense_fix)) << env_dense;

  const JobInput moe{"moe.toml", load_job_config(test::kSourceDir + "/job_templates/tiny.toml", site_,
                                                 {"model.experts=6", "training.global_batch=16"})};
  const std::string indivisible =
      error_of([&] { decide_layout(request("4x1x1x1e4"), step(4, 1), site_, &moe, std::nullopt); });
  EXPECT_TRUE(contains(indivisible,
                       "--axonn-layout=4x1x1x1e4 cannot run job moe.toml with 4 tasks: e4 asks for "
                       "expert parallelism 4, which does not divide model.experts = 6; use one that "
                       "divides both 6 and G_data = 4 (e2), or drop 'e4'"))
      << indivisible;
  const Decision explicit_moe = decide_layout(request("4x1x1x1e2"), step(4, 1), site_, &moe, std::nullopt);
  EXPECT_EQ(format_layout_with_order(explicit_moe.layout), "4x1x1x1e2:xyzd");
  EXPECT_TRUE(contains(explicit_moe.summary, "--axonn-layout=4x1x1x1e2 gives 4x1x1x1e2:xyzd for 4 tasks on 1 node"))
      << explicit_moe.summary;
  const Decision validated = decide_layout(request("validate"), step(4, 1), site_, &moe, std::string("4x1x1x1e2:yxzd"));
  EXPECT_EQ(format_layout_with_order(validated.layout), "4x1x1x1e2:yxzd");
  // auto chooses among the layouts at every expert parallelism that divides E and G_data.
  const Layout chosen = decide_layout(request("auto"), step(4, 1), site_, &moe, std::nullopt).layout;
  EXPECT_EQ(chosen.data % chosen.experts, 0) << format_layout(chosen);
  EXPECT_EQ(6 % chosen.experts, 0) << format_layout(chosen);
  // A wrong task count: the alternative keeps the expert parallelism where it divides the data axis.
  const std::string product =
      error_of([&] { decide_layout(request("2x1x1x1e2"), step(8, 2), site_, &moe, std::nullopt); });
  EXPECT_TRUE(contains(product, "the step has 8 tasks; use --axonn-layout=8x1x1x1e2 or")) << product;
  // Without a job TOML there is no model to check against: the task count and policy only.
  const Decision no_job = decide_layout(request("4x1x1x1e4"), step(4, 1), site_, nullptr, std::nullopt);
  EXPECT_EQ(no_job.layout.experts, 4);
  // srun's decision reaches slurmstepd with its expert part.
  EXPECT_EQ(format_layout_with_order(check_handoff("4x1x1x1e2:yxzd", 4, site_)), "4x1x1x1e2:yxzd");
}

TEST_F(SpankDecision, SitePolicyAppliesToExplicitLayouts) {
  const SiteConfig strict = site_with("max_tensor_parallel = 2\nallowed_axis_sizes = [1, 2, 4]\n");
  const std::string tp =
      error_of([&] { decide_layout(request("1x2x2x1"), step(4, 1), strict, nullptr, std::nullopt); });
  EXPECT_TRUE(contains(tp, "G_x*G_y*G_z=4 exceeds max_tensor_parallel=2")) << tp;
  EXPECT_TRUE(contains(tp, "use --axonn-layout=4x1x1x1")) << tp;
  const std::string sizes =
      error_of([&] { decide_layout(request("3x1x1x1"), step(3, 1), strict, nullptr, std::nullopt); });
  EXPECT_TRUE(contains(sizes, "axis data size 3 is not in allowed_axis_sizes")) << sizes;
  EXPECT_TRUE(contains(sizes, "no layout of 3 tasks runs it")) << sizes;
  EXPECT_EQ(policy_problem(strict, parse_layout_text("2x2x1x1", "t")), "");
}

TEST_F(SpankDecision, AutoIsTheChooserOfAxonnLayout) {
  for (const auto& [tasks, nodes] : std::vector<std::pair<int, int>>{{4, 1}, {8, 2}, {6, 1}, {12, 3}}) {
    const Decision d = decide_layout(request("auto"), step(tasks, nodes), site_, &job_, std::nullopt);
    const ChooserResult expected = choose_layout(chooser_input(site_, job_.config, nodes, tasks / nodes));
    ASSERT_TRUE(expected.fits());
    EXPECT_EQ(format_layout_with_order(d.layout), format_layout_with_order(expected.best().layout)) << tasks;
    EXPECT_TRUE(contains(d.summary, "--axonn-layout=auto chose " + format_layout_with_order(d.layout) + " for " +
                                        std::to_string(tasks) + " tasks on " + std::to_string(nodes) + " node"))
        << d.summary;
    EXPECT_TRUE(contains(d.summary, "predicted step")) << d.summary;
  }
}

TEST_F(SpankDecision, AutoWithoutJobIsDataParallelWithinPolicy) {
  const Decision d = decide_layout(request("auto"), step(4, 1), site_, nullptr, std::nullopt);
  EXPECT_EQ(format_layout_with_order(d.layout), "4x1x1x1:xyzd");
  EXPECT_TRUE(contains(d.summary, "no job TOML on the command line")) << d.summary;
  EXPECT_TRUE(contains(d.summary, "pure data parallel")) << d.summary;
  // Data parallel 4 is not an allowed size: the fewest tensor-parallel ranks, on x first.
  const Decision strict =
      decide_layout(request("auto"), step(4, 1), site_with("allowed_axis_sizes = [1, 2]\n"), nullptr, std::nullopt);
  EXPECT_EQ(format_layout_with_order(strict.layout), "2x2x1x1:xyzd");
  const std::string none = error_of([&] {
    decide_layout(request("auto"), step(3, 1), site_with("allowed_axis_sizes = [1, 2]\n"), nullptr, std::nullopt);
  });
  EXPECT_TRUE(contains(none, "no layout of 3 tasks satisfies the policy of site strict")) << none;
}

TEST_F(SpankDecision, AutoWhenNothingFitsNamesTheSmallestChange) {
  const SiteConfig small = load_site_config_string(
      "[site]\nname = \"small\"\n[node]\ngpus_per_node = 1\nmemory_gib = 0.001\n", "small.toml");
  const JobInput job{"tiny.toml", load_job_config(test::kSourceDir + "/job_templates/tiny.toml", small)};
  const std::string e = error_of([&] { decide_layout(request("auto"), step(1, 1), small, &job, std::nullopt); });
  EXPECT_TRUE(contains(e, "--axonn-layout=auto: no layout of 1 task fits job tiny.toml on site small: ")) << e;
  EXPECT_TRUE(contains(e, "needs >=")) << e;
}

TEST_F(SpankDecision, ValidateChecksTheUsersAxonnLayout) {
  const std::string unset =
      error_of([&] { decide_layout(request("validate"), step(4, 1), site_, nullptr, std::nullopt); });
  EXPECT_TRUE(contains(unset, "AXONN_LAYOUT, which is not set in your environment")) << unset;
  EXPECT_TRUE(contains(unset, "export AXONN_LAYOUT=4x1x1x1")) << unset;
  const std::string wrong =
      error_of([&] { decide_layout(request("validate"), step(4, 1), site_, nullptr, std::string("2x2x2x1")); });
  EXPECT_TRUE(contains(wrong, "AXONN_LAYOUT=2x2x2x1 has 8 ranks")) << wrong;
  EXPECT_TRUE(contains(wrong, "set AXONN_LAYOUT=1x2x2x1 or use --axonn-layout=auto")) << wrong;
  const std::string garbage =
      error_of([&] { decide_layout(request("validate"), step(4, 1), site_, nullptr, std::string("four")); });
  EXPECT_TRUE(contains(garbage, "AXONN_LAYOUT 'four'")) << garbage;
  const Decision ok = decide_layout(request("validate"), step(4, 1), site_, &job_, std::string("1x2x2x1"));
  EXPECT_EQ(format_layout_with_order(ok.layout), "1x2x2x1:xyzd");
  EXPECT_TRUE(ok.warnings.empty());
  EXPECT_TRUE(contains(ok.summary, "--axonn-layout=validate checked AXONN_LAYOUT=1x2x2x1:xyzd for 4 tasks"))
      << ok.summary;
}

TEST_F(SpankDecision, UsersAxonnLayoutWinsButIsChecked) {
  const Decision d = decide_layout(request("auto"), step(4, 1), site_, nullptr, std::string("1x2x2x1"));
  EXPECT_EQ(format_layout_with_order(d.layout), "4x1x1x1:xyzd");  // the plugin's decision, handed on
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_TRUE(contains(d.warnings[0], "AXONN_LAYOUT=1x2x2x1 (from your environment) is what the tasks get"))
      << d.warnings[0];
  const std::string stale =
      error_of([&] { decide_layout(request("2x1x1x1"), step(2, 1), site_, nullptr, std::string("2x2x1x1")); });
  EXPECT_TRUE(contains(stale, "AXONN_LAYOUT=2x2x1x1 (from your environment) has 4 ranks")) << stale;
  EXPECT_TRUE(contains(stale, "unset AXONN_LAYOUT to use the plugin's choice")) << stale;
}

TEST_F(SpankDecision, UnevenStepsAndOversubscribedNodes) {
  StepShape uneven{3, 2, 0, {}};
  EXPECT_EQ(describe(uneven), "3 tasks on 2 nodes (uneven tasks per node, priced as 1 per node)");
  const Decision d = decide_layout(request("auto"), uneven, site_, &job_, std::nullopt);
  const ChooserResult expected = choose_layout(chooser_input(site_, job_.config, 3, 1));
  EXPECT_EQ(d.layout, expected.best().layout);
  // laptop-cpu has 4 "GPUs" per node.
  const Decision over = decide_layout(request("auto"), step(8, 1), site_, nullptr, std::nullopt);
  ASSERT_EQ(over.warnings.size(), 1u);
  EXPECT_TRUE(contains(over.warnings[0], "8 tasks per node, but site laptop-cpu has 4 GPUs per node"))
      << over.warnings[0];
}

TEST_F(SpankDecision, HandoffCheckedAgainOnTheNode) {
  EXPECT_EQ(format_layout_with_order(check_handoff("2x2x1x1:yxzd", 4, site_)), "2x2x1x1:yxzd");
  EXPECT_TRUE(contains(error_of([&] { check_handoff("2x2x1x1:xyzd", 8, site_); }),
                       "srun decided layout 2x2x1x1:xyzd with 4 ranks, but this step has 8 tasks"));
  EXPECT_TRUE(contains(error_of([&] { check_handoff("1x4x1x1", 4, site_with("max_tensor_parallel = 2\n")); }),
                       "which site strict forbids: site policy"));
  EXPECT_TRUE(contains(error_of([&] { check_handoff("$(reboot)", 4, site_); }), "the layout srun decided '$(reboot)'"));
  const std::string origin =
      kept_user_layout_origin(std::string(100, '9'), "axonn SPANK plugin: " + std::string(900, 'o'));
  EXPECT_EQ(origin.size(), kMaxOriginLength);
  EXPECT_TRUE(origin.starts_with("AXONN_LAYOUT=" + std::string(64, '9') + " from the user's environment")) << origin;
  EXPECT_FALSE(contains(origin, "decided: axonn SPANK plugin")) << origin;
}

// ---- the built plugin ----

#ifdef AXONN_SPANK_PLUGIN
TEST(SpankPlugin, ExportsOnlyWhatSlurmLooksUp) {
  const auto r = test::run_command(std::string("nm -D --defined-only ") + AXONN_SPANK_PLUGIN + " | cut -d\" \" -f3");
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> names;
  for (size_t start = 0, end; start < r.output.size(); start = end + 1) {
    end = r.output.find('\n', start);
    if (end == std::string::npos) end = r.output.size();
    if (end > start) names.push_back(r.output.substr(start, end - start));
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"plugin_name", "plugin_type", "plugin_version", "slurm_spank_init",
                                      "slurm_spank_local_user_init", "slurm_spank_task_init", "spank_plugin_version"}))
      << r.output;
}

TEST(SpankPlugin, LinksNoGpuIoOrLoggingLibrary) {
  const auto r = test::run_command(std::string("readelf -d ") + AXONN_SPANK_PLUGIN + " | grep NEEDED");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* lib : {"cuda", "nccl", "hdf5", "spdlog", "pmix", "gloo", "openblas", "libslurm"})
    EXPECT_FALSE(contains(r.output, lib)) << lib << " in\n" << r.output;
  EXPECT_TRUE(contains(r.output, "libtomlplusplus")) << r.output;  // axonn_config's one dependency
}
#endif

}  // namespace
}  // namespace axonn::spank
