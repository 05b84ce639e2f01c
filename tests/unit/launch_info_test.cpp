// Reading the launchers' variables: torchrun/ddprun, Open MPI, Slurm, and
// the errors for malformed ones.
#include <ddp/errors.h>
#include <ddp/init.h>

#include "rendezvous/slurm.h"
#include "support/raised.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

namespace ddp {
namespace {

// Sets the given variables (and clears every launcher variable) for one test.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) {
    for (const char* name : kAll) unsetenv(name);
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~Env() {
    for (const char* name : kAll) unsetenv(name);
  }

 private:
  static constexpr const char* kAll[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_STEP_NODELIST",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_JOB_ID",
                                         "SLURM_STEP_ID"};
};

using ddp::testing::raised;
using ddp::testing::Raised;

// What launch_info_from_env() raises with these variables set.
Raised launch_error(const std::map<std::string, std::string>& vars) {
  Env env(vars);
  return raised([] { launch_info_from_env(); });
}

TEST(LaunchInfo, TorchrunVariables) {
  Env env({{"RANK", "3"},
           {"WORLD_SIZE", "4"},
           {"LOCAL_RANK", "1"},
           {"LOCAL_WORLD_SIZE", "2"},
           {"MASTER_ADDR", "10.0.0.1"},
           {"MASTER_PORT", "29500"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.master_addr, "10.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
}

TEST(LaunchInfo, OpenMpiVariables) {
  Env env({{"OMPI_COMM_WORLD_RANK", "5"},
           {"OMPI_COMM_WORLD_SIZE", "8"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
}

TEST(LaunchInfo, SlurmVariables) {
  Env env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
}

TEST(LaunchInfo, SrunDerivesTheMasterFromTheStep) {
  Env env({{"SLURM_PROCID", "1"},
           {"SLURM_NTASKS", "2"},
           {"SLURM_STEP_NODELIST", "node[07-09,12],gpu3"},
           {"SLURM_JOB_NODELIST", "other"},
           {"SLURM_JOB_ID", "1234"},
           {"SLURM_STEP_ID", "3"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.master_addr, "node07");
  EXPECT_EQ(info.master_port, detail::slurm_step_port(1234, 3));
}

TEST(LaunchInfo, SrunStepsOfOneJobGetDifferentPorts) {
  std::set<int> ports;
  for (long job : {1234L, 1235L, 1236L})
    for (long step = 0; step < 16; ++step) ports.insert(detail::slurm_step_port(job, step));
  EXPECT_EQ(ports.size(), 48u);
  for (long job = 0; job < 1600; ++job) {
    for (long step : {0L, 15L}) {
      const int port = detail::slurm_step_port(job, step);
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, 32768) << "job " << job;  // below Linux's ephemeral ports
    }
  }
}

TEST(LaunchInfo, ABatchScriptsOwnProcessDerivesNothing) {
  // sbatch's script runs as SLURM_PROCID 0 of SLURM_NTASKS, outside any step.
  Env env({{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "2"},
           {"SLURM_JOB_NODELIST", "rack[2-3]-n[05,09]"},
           {"SLURM_JOB_ID", "77"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.master_addr, "");
  EXPECT_EQ(info.master_port, -1);
}

TEST(LaunchInfo, MasterVariablesWinOverSrunsDerivation) {
  Env env({{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "2"},
           {"SLURM_STEP_NODELIST", "node1"},
           {"SLURM_JOB_ID", "5"},
           {"SLURM_STEP_ID", "0"},
           {"MASTER_ADDR", "10.0.0.9"},
           {"MASTER_PORT", "29511"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.master_addr, "10.0.0.9");
  EXPECT_EQ(info.master_port, 29511);
}

TEST(LaunchInfo, OnlySrunsRanksDeriveTheMaster) {
  // torchrun inside an allocation sets its own master: nothing is derived.
  Env env({{"RANK", "0"},
           {"WORLD_SIZE", "2"},
           {"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "1"},
           {"SLURM_STEP_NODELIST", "node1"},
           {"SLURM_JOB_ID", "5"},
           {"SLURM_STEP_ID", "0"}});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.master_addr, "");
  EXPECT_EQ(info.master_port, -1);
}

TEST(LaunchInfo, SlurmHostLists) {
  EXPECT_EQ(detail::first_host_of_slurm_nodelist("vm", "L"), "vm");
  EXPECT_EQ(detail::first_host_of_slurm_nodelist("a,b", "L"), "a");
  EXPECT_EQ(detail::first_host_of_slurm_nodelist("n[001-004]", "L"), "n001");
  EXPECT_EQ(detail::first_host_of_slurm_nodelist("n[3,1-2].cluster", "L"), "n3.cluster");
  EXPECT_EQ(detail::first_host_of_slurm_nodelist("rack[2-3]-n[05,09]", "L"), "rack2-n05");
  for (const char* bad : {"n[1-2", "n]1", "[1-2]x[3", ",n1"}) {
    EXPECT_THROW(detail::first_host_of_slurm_nodelist(bad, "L"), InvalidArgument) << bad;
  }
}

TEST(LaunchInfo, TorchrunWinsOverTheOthers) {
  Env env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(launch_info_from_env().source, "torchrun");
}

TEST(LaunchInfo, NothingSetLeavesRankUnknown) {
  Env env({});
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.rank, -1);
  EXPECT_EQ(info.world_size, -1);
  EXPECT_EQ(info.master_port, -1);
}

TEST(LaunchInfo, ErrorsNameTheVariableAndTheForm) {
  Raised r = launch_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("RANK='x'")) << r;

  r = launch_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("RANK=2")) << r;
  EXPECT_TRUE(r.mentions("WORLD_SIZE=2")) << r;

  // RANK without WORLD_SIZE: the message names the missing variable.
  r = launch_error({{"RANK", "0"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("RANK")) << r;
  EXPECT_TRUE(r.mentions("WORLD_SIZE")) << r;

  // The value and the range it must be in.
  r = launch_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("WORLD_SIZE='0'")) << r;
  EXPECT_TRUE(r.mentions("[1, ")) << r;

  r = launch_error({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("OMPI_COMM_WORLD_RANK=4")) << r;
  EXPECT_TRUE(r.mentions("OMPI_COMM_WORLD_SIZE=4")) << r;

  r = launch_error({{"MASTER_PORT", "70000"}});
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("MASTER_PORT='70000'")) << r;
  EXPECT_TRUE(r.mentions("[1, 65535]")) << r;
}

TEST(InitProcessGroup, UnknownRankSaysHowToLaunch) {
  Env env({});
  Raised r = raised([] { init_process_group(); });
  ASSERT_TRUE(r) << r;
  EXPECT_EQ(r.context.operation, "init_process_group") << r;
  EXPECT_EQ(r.context.rank, -1) << r;
  // The launchers that would set the rank.
  for (const char* launcher : {"ddprun", "torchrun", "mpirun", "srun"}) {
    EXPECT_TRUE(r.mentions(launcher)) << launcher << ": " << r;
  }
}

TEST(InitProcessGroup, MalformedInitMethod) {
  Env env({});
  Raised r = raised([] {
    init_process_group(InitOptions().init_method("tcp://nohostport").rank(0).world_size(1));
  });
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("'nohostport'")) << r;
  EXPECT_TRUE(r.mentions("host:port")) << r;

  // The init method given and the ones there are.
  r = raised(
      [] { init_process_group(InitOptions().init_method("redis://x").rank(0).world_size(1)); });
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("'redis://x'")) << r;
  for (const char* method : {"env://", "tcp://host:port", "file:///path"}) {
    EXPECT_TRUE(r.mentions(method)) << method << ": " << r;
  }
}

}  // namespace
}  // namespace ddp
