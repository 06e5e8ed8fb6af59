// The `kiln` command's subcommands. Each lives in its own cmd_*.cpp and registers itself with a
// static CommandRegistrar, so adding a command touches only its file:
//
//   static const CommandRegistrar reg({"inspect", "Show a model's inputs, outputs and ops", setup_inspect});
//
// `setup` declares the subcommand's options on the CLI11 app it is given and returns the action to
// run once the command line has parsed. Actions report failure by throwing kiln::Error; main prints
// it as one line and exits 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cli {

using Action = std::function<void()>;

struct CommandDef {
  std::string name;
  std::string description;
  std::function<Action(CLI::App&)> setup;
};

std::vector<CommandDef>& command_registry();

// Thrown by an action that ends the program with a status of its own (after its message).
struct ExitStatus {
  int status = 0;
};

struct CommandRegistrar {
  explicit CommandRegistrar(CommandDef def) { command_registry().push_back(std::move(def)); }
};

}  // namespace kiln::cli
