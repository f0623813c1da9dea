#pragma once

// RedisClusterTest: a Redis Cluster of three masters (no replicas), created once per test
// suite with redis-cli --cluster create on loopback ports, for the tests of RedisStore on a
// cluster (redis_store_cluster_test.cc, redis_store_multislot_test.cc).

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/testing/redis_server.h"

namespace sluice::testing {

using namespace std::chrono_literals;

class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string create = "redis-cli --cluster create";
    for (int i = 0; i < 3; ++i) {
      nodes_[i] = new RedisServer({"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes.conf", "--cluster-node-timeout", "5000"});
      create += " 127.0.0.1:" + std::to_string(nodes_[i]->port());
    }
    ASSERT_EQ(std::system((create + " --cluster-replicas 0 --cluster-yes >/dev/null").c_str()), 0);
    AwaitClusterOk();
  }
  // Until every node reports cluster_state:ok: after the creation, and after a test that froze
  // a node for longer than the node timeout (the cluster is then down until it is seen back).
  static void AwaitClusterOk() {
    for (int i = 0; i < 3; ++i) {
      testing::Client client(nodes_[i]->port());
      bool ok = false;
      // A watchdog of 60 s: on a loaded machine the nodes take their time to agree.
      for (int tries = 0; tries < 6000 && !ok; ++tries) {
        testing::Reply info = client.Run({"CLUSTER", "INFO"});
        ok = info && std::string(info->str).find("cluster_state:ok") != std::string::npos;
        if (!ok) {
          std::this_thread::sleep_for(10ms);
        }
      }
      ASSERT_TRUE(ok) << "node " << i << " never reported cluster_state:ok";
    }
  }
  static void TearDownTestSuite() {
    for (RedisServer*& node : nodes_) {
      delete node;
      node = nullptr;
    }
  }

  static std::string Url() {
    return "redis+cluster://127.0.0.1:" + std::to_string(nodes_[0]->port());
  }
  static RedisStoreOptions ClusterOptions() {
    absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(Url());
    EXPECT_TRUE(options.ok()) << options.status();
    options->use_caller_time = true;
    options->timeout = 30s;  // Only a watchdog: these tests are not about timeouts.
    options->expiry_margin = 600s;
    return *options;
  }
  static std::string Id(int node) {
    testing::Client client(nodes_[node]->port());
    return client.Run({"CLUSTER", "MYID"})->str;
  }
  // The node serving `slot`, by its index here.
  static int Owner(int slot) {
    for (int i = 0; i < 3; ++i) {
      testing::Client client(nodes_[i]->port());
      testing::Reply count = client.Run({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
      testing::Reply nodes = client.Run({"CLUSTER", "NODES"});
      // This node's own line ("myself") lists the slot ranges it serves.
      std::istringstream lines(nodes->str);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("myself") == std::string::npos) {
          continue;
        }
        std::istringstream fields(line);
        std::string field;
        for (int f = 0; fields >> field; ++f) {
          if (f < 8) {
            continue;
          }
          const size_t dash = field.find('-');
          const int first = std::stoi(field.substr(0, dash));
          const int last = dash == std::string::npos ? first : std::stoi(field.substr(dash + 1));
          if (slot >= first && slot <= last) {
            return i;
          }
        }
      }
    }
    return -1;
  }

  static inline RedisServer* nodes_[3] = {};
};

}  // namespace sluice::testing
