// What `sluice explain` and `sluice top` print of the server's answers: their lines, and never a
// control byte a caller put in a key or a value (an ESC would be a terminal's command).

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "tools/explain.h"
#include "tools/top.h"

namespace sluice::tools {
namespace {

TEST(FormatTopTest, ListsEachRuleAndKeyWithItsShare) {
  const auto answer = nlohmann::json::parse(R"({"by":"denied","window_s":300,"rules":[
      {"rule":"api.user","total":8,"bound":0,"keys":[
        {"key":"api user=mallory","count":6,"error":0},
        {"key":"api user=\u001b[2Jx","count":2,"error":0}]}]})");
  const std::string text = FormatTop(answer);
  EXPECT_NE(text.find("top offenders by denied over the last 300 s"), std::string::npos);
  EXPECT_NE(text.find("api.user: 8 denials (each count within 0)"), std::string::npos);
  EXPECT_NE(text.find("         6   75.0%  api user=mallory\n"), std::string::npos) << text;
  EXPECT_NE(text.find("api user=?[2Jx"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
}

TEST(FormatExplanationTest, NamesTheDeciderAndPrintsNoControlByte) {
  const auto answer = nlohmann::json::parse(R"({"allowed":false,"explain":{
      "domain":"api","cost":1,"admitted":false,
      "decided_by":{"descriptor":0,"limit":0,"name":"api.user"},
      "descriptors":[{"entries":[{"key":"user","value":"a\u001b]0;owned\u0007"}],
        "rule":"api.user","match":"rule api.user","limits":[{"name":"api.user",
        "algorithm":"fixed_window","limit":1,"period":"1m","mode":"hard","allowed":false,
        "remaining":0,"reset_after_us":30000000,"retry_after_us":30000000,"delay_us":0,
        "source":"api.user","key":"api user=a\u001b]0;owned\u0007",
        "before":{"remaining":0,"reset_after_us":30000000},
        "after":{"remaining":0,"reset_after_us":30000000},"verdict":"denied"}]}]}})");
  const std::string text = FormatExplanation(answer);
  EXPECT_NE(text.find("api at cost 1: denied\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  api.user  <- decided the answer\n"), std::string::npos) << text;
  EXPECT_NE(text.find("before: 0 remaining, clear in 30.0s"), std::string::npos) << text;
  EXPECT_NE(text.find("retry in 30.0s"), std::string::npos) << text;
  EXPECT_NE(text.find("user=a?]0;owned?"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\x07'), std::string::npos);
}

}  // namespace
}  // namespace sluice::tools
