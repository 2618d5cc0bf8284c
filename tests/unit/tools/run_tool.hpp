// Runs the real `normjit` binary (path in NORMJIT_TOOL, set by ctest) and captures its exit
// code, stdout and stderr, as a user or a deployment script would see them. Used by the CLI
// tests and the GPU deployment test.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.hpp"

extern char** environ;

namespace normjit::testing {

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.flush()) << "cannot write " << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ToolResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out, err;

  // The lines of stderr (of stdout) that start with prefix.
  std::vector<std::string> err_lines(const std::string& prefix) const {
    return lines_of(err, prefix);
  }
  std::vector<std::string> out_lines(const std::string& prefix) const {
    return lines_of(out, prefix);
  }
  static std::vector<std::string> lines_of(const std::string& text, const std::string& prefix) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) lines.push_back(line);
    }
    return lines;
  }
  // For failure messages.
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + "\n--- stdout ---\n" + out + "--- stderr ---\n" +
           err;
  }
};

// NORMJIT_TOOL (ctest sets it), else the binary this test was built with.
inline std::string tool_path() {
  const char* tool = std::getenv("NORMJIT_TOOL");
  return tool && *tool ? tool : NORMJIT_TOOL_PATH;
}

// Runs `normjit args...`. env: "NAME=value" sets a variable, "NAME" removes it. stdout_to: a
// file to give the tool as its standard output (e.g. /dev/full) in place of the captured one.
inline ToolResult run_tool(const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {},
                           const std::string& stdout_to = "") {
  ToolResult result;
  const std::string tool = tool_path();
  if (tool.empty()) {
    ADD_FAILURE() << "NORMJIT_TOOL is not set (ctest sets it to the normjit binary)";
    return result;
  }
  TempDir io;
  const std::string out_path = io / "stdout", err_path = io / "stderr";

  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.push_back(*e);
  for (const std::string& change : env) {
    const std::string name = change.substr(0, change.find('='));
    std::erase_if(environment, [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; });
    if (change.find('=') != std::string::npos) environment.push_back(change);
  }
  std::vector<char*> envp, argv;
  for (std::string& v : environment) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::vector<std::string> words = {tool};
  words.insert(words.end(), args.begin(), args.end());
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  // Files, not pipes: nothing to drain concurrently, whatever the child prints.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                   stdout_to.empty() ? out_path.c_str() : stdout_to.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, tool.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ADD_FAILURE() << "cannot run " << tool << ": " << std::strerror(spawned);
    return result;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stdout_to.empty()) result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

}  // namespace normjit::testing
