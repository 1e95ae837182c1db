// The launch environment (contract/launch_env.h): one parser for what
// weft-run and the operator set and weft-worker reads, its errors naming the
// variable, and the writer's output read back unchanged.
#include "launch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weft::contract {
namespace {

using ::testing::HasSubstr;

std::string env_error(const EnvMap& env) {
  try {
    parse_launch_env(env);
  } catch (const LaunchEnvError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, DefaultsToOneRank) {
  LaunchEnv e = parse_launch_env({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world, 1);
  EXPECT_EQ(e.attempt, 0);
  // Set but empty is unset (a pod spec's `value: ""`).
  EXPECT_EQ(parse_launch_env({{"LOCAL_RANK", ""}, {"RANK", ""}}).local_rank, 0);
}

// In a gang an empty RANK is not rank 0: it would be a second rank 0 beside
// the real one.
TEST(LaunchEnv, AnEmptyRankInAGangIsRefused) {
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"RANK", ""}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
              HasSubstr("RANK: set but empty; each rank of a WORLD_SIZE of 2 needs its own in [0, 1]"));
}

TEST(LaunchEnv, ErrorsNameTheVariable) {
  EXPECT_THAT(env_error({{"RANK", "abc"}}), HasSubstr("RANK: 'abc'"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"RANK", "2"}}), HasSubstr("RANK: '2'"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_PORT", "29500"}}), HasSubstr("MASTER_ADDR"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(env_error({{"MASTER_PORT", "70000"}}), HasSubstr("MASTER_PORT: '70000'"));
  EXPECT_THAT(env_error({{"WEFT_ATTEMPT", "-1"}}), HasSubstr("WEFT_ATTEMPT"));
  // The variables the memory check and the metrics port read were once
  // parsed with atoi (garbage read as 1) or apart: now by the same rules.
  EXPECT_THAT(env_error({{"LOCAL_RANK", "two"}}), HasSubstr("LOCAL_RANK: 'two'"));
  EXPECT_THAT(env_error({{"LOCAL_RANK", "-1"}}), HasSubstr("LOCAL_RANK: '-1'"));
  EXPECT_THAT(env_error({{"LOCAL_WORLD_SIZE", "4x"}}), HasSubstr("LOCAL_WORLD_SIZE: '4x'"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "0"}}), HasSubstr("WORLD_SIZE: '0' is not an integer in [1, "));
  EXPECT_THAT(env_error({{"NODE_RANK", "+1"}}), HasSubstr("NODE_RANK: '+1'"));
  EXPECT_EQ(parse_launch_env({{"LOCAL_RANK", "2"}}).local_rank, 2);
}

TEST(LaunchEnv, HostFieldsAgreeWithTheRank) {
  EXPECT_THAT(env_error({{"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}), HasSubstr("LOCAL_RANK: '2' is not an integer in [0, 1]"));
  const EnvMap host = {{"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"NODE_RANK", "1"},
                       {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  EnvMap third = host;
  third["RANK"] = "3";
  third["LOCAL_RANK"] = "1";
  EXPECT_EQ(parse_launch_env(third).rank, 3);
  third["RANK"] = "1";
  EXPECT_THAT(env_error(third), HasSubstr("RANK: '1' is not NODE_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = 1 * 2 + 1 = 3"));
}

// What a launcher writes, a rank reads back as it was.
TEST(LaunchEnv, WhatALauncherSetsParsesBack) {
  LaunchEnv e;
  e.world = 6;
  e.local_world = 3;
  e.node_rank = 1;
  e.local_rank = 2;
  e.rank = 5;
  e.master_addr = "job-0.job.ns.svc";
  e.master_port = 29500;
  e.attempt = 7;
  e.token = "secret";
  e.planned_world = 12;
  EnvMap m;
  for (const auto& [k, v] : launch_env_vars(e)) m[k] = v;
  const LaunchEnv back = parse_launch_env(m);
  EXPECT_EQ(back.rank, 5);
  EXPECT_EQ(back.world, 6);
  EXPECT_EQ(back.local_rank, 2);
  EXPECT_EQ(back.local_world, 3);
  EXPECT_EQ(back.node_rank, 1);
  EXPECT_EQ(back.master_addr, e.master_addr);
  EXPECT_EQ(back.master_port, 29500);
  EXPECT_EQ(back.attempt, 7);
  EXPECT_EQ(back.token, "secret");
  EXPECT_EQ(back.planned_world, 12);
  EXPECT_EQ(back.planned(), 12);
  // A host of several ranks: its launcher sets RANK and LOCAL_RANK per rank.
  for (const auto& [k, v] : launch_env_vars(e, false)) EXPECT_TRUE(k != "RANK" && k != "LOCAL_RANK") << k;
  // No token, no variable: the rank would present an empty one.
  e.token.clear();
  for (const auto& [k, v] : launch_env_vars(e)) EXPECT_NE(k, "WEFT_RDZV_TOKEN");
  // A job at its planned size says nothing of it.
  e.planned_world = 0;
  for (const auto& [k, v] : launch_env_vars(e)) EXPECT_NE(k, "WEFT_PLANNED_WORLD_SIZE");
}

// An elastic job's smaller gang is told the size its batch is planned for;
// a planned size below the gang's own cannot be.
TEST(LaunchEnv, PlannedWorldSizeIsAtLeastTheWorld) {
  const EnvMap base = {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  EXPECT_EQ(parse_launch_env(base).planned(), 2);
  EnvMap m = base;
  m["WEFT_PLANNED_WORLD_SIZE"] = "4";
  EXPECT_EQ(parse_launch_env(m).planned(), 4);
  m["WEFT_PLANNED_WORLD_SIZE"] = "1";
  EXPECT_THAT(env_error(m), HasSubstr("WEFT_PLANNED_WORLD_SIZE: '1' is not an integer in [2, "));
}

}  // namespace
}  // namespace weft::contract
