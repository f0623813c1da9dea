// The files a rules directory is read from (RuleSet::Files): *.yaml and *.yml, its folders'
// too, as envoyproxy/ratelimit's runtime reads them; names starting with '.' skipped when
// asked (their RUNTIME_IGNOREDOTFILES); a symlink to a folder not followed; folders nested too
// deep refused, naming the folder.

#include <filesystem>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "src/core/status.h"
#include "tests/testing/scratch_dir.h"

namespace sluice::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RuleFilesTest : public ::testing::Test {
 protected:
  void Write(const std::string& name) {
    std::filesystem::create_directories(std::filesystem::path(dir_.Path(name)).parent_path());
    dir_.Write(name, "domain: d\n");
  }
  // The files read, relative to the directory.
  std::vector<std::string> Read(bool skip_dotfiles) {
    absl::StatusOr<std::vector<std::string>> files = RuleSet::Files(dir_.path(), skip_dotfiles);
    EXPECT_TRUE(files.ok()) << files.status();
    std::vector<std::string> relative;
    for (const std::string& file : files.value_or(std::vector<std::string>{})) {
      relative.push_back(std::filesystem::relative(file, dir_.path()).string());
    }
    return relative;
  }

  testing::ScratchDir dir_;
};

TEST_F(RuleFilesTest, FoldersAreReadInPathOrderAndDotfilesSkippedWhenAsked) {
  Write("b.yaml");
  Write("a.yml");
  Write("README.md");
  Write("team/c.yaml");
  Write("team/deeper/d.yaml");
  Write(".e.yaml");
  Write(".old/f.yaml");
  Write("team/.g.yaml.swp");
  EXPECT_THAT(Read(false), ElementsAre(".e.yaml", ".old/f.yaml", "a.yml", "b.yaml", "team/c.yaml",
                                       "team/deeper/d.yaml"));
  EXPECT_THAT(Read(true), ElementsAre("a.yml", "b.yaml", "team/c.yaml", "team/deeper/d.yaml"));
}

TEST_F(RuleFilesTest, ASymlinkToAFolderIsNotFollowed) {
  Write("a.yaml");
  std::filesystem::create_directory_symlink(dir_.path(), dir_.Path("loop"));
  EXPECT_THAT(Read(false), ElementsAre("a.yaml"));
}

TEST_F(RuleFilesTest, FoldersNestedTooDeepAreRefused) {
  std::string deep;
  for (int i = 0; i < RuleSet::kMaxFolderDepth; ++i) {
    deep += "x/";
  }
  Write(deep + "fits.yaml");
  EXPECT_EQ(Read(false).size(), 1U);
  Write(deep + "x/too_deep.yaml");
  absl::StatusOr<std::vector<std::string>> files = RuleSet::Files(dir_.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(internal::Message(files.status())),
              HasSubstr(fmt::format("folders nested more than {} deep", RuleSet::kMaxFolderDepth)));
}

}  // namespace
}  // namespace sluice::server
