// `kiln`: the command line. Subcommands register themselves (commands.h); this file only parses,
// dispatches and turns every failure into one line on stderr: exit 1 for errors, 2 for bad usage.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <new>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/version.h"

namespace kiln::cli {

std::vector<CommandDef>& command_registry() {
  static std::vector<CommandDef> commands;
  return commands;
}

}  // namespace kiln::cli

namespace {

// Messages from deep layers (the ONNX checker) can span lines; the contract is one line.
std::string one_line(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::replace(message.begin(), message.end(), '\r', ' ');
  while (!message.empty() && message.back() == ' ') message.pop_back();
  return message;
}

int report(const std::string& message) {
  std::cerr << "kiln: error: " << one_line(message) << std::endl;
  return 1;
}

// A command-line mistake: "kiln: error: ..." like every other error, exit status 2. An unknown or
// missing command names the valid ones.
int usage_error(const CLI::ParseError& e, const std::vector<kiln::cli::CommandDef>& commands, int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto& c : commands) names.push_back(c.name);
  const std::string list = fmt::format("{}", fmt::join(names, ", "));
  std::string message = e.what();
  if (argc < 2) {
    message = fmt::format("a command is required: {} (kiln COMMAND --help for each)", list);
  } else if (argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    message = fmt::format("unknown command '{}'; the commands are: {}", argv[1], list);
  }
  std::cerr << "kiln: error: " << one_line(message) << "\n";
  std::cerr << "Run 'kiln --help' or 'kiln COMMAND --help' for more information." << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"Kiln: run ONNX models natively on CPU.", "kiln"};
  app.set_version_flag("--version", fmt::format("kiln {}", kiln::kVersion));
  app.require_subcommand(1);

  auto commands = command_registry();  // static-init order is arbitrary; list them by name
  std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, Action>> actions;
  try {
    for (const CommandDef& def : commands) {
      CLI::App* sub = app.add_subcommand(def.name, def.description);
      actions.emplace_back(sub, def.setup(*sub));
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
      return usage_error(e, commands, argc, argv);
    }
    for (auto& [sub, action] : actions)
      if (sub->parsed()) action();
    return 0;
  } catch (const kiln::cli::ExitStatus& e) {
    return e.status;
  } catch (const kiln::Error& e) {
    return report(e.what());
  } catch (const std::bad_alloc&) {
    return report("out of memory");
  } catch (const std::exception& e) {
    return report(fmt::format("internal error: {}", e.what()));
  } catch (...) {
    return report("internal error: unknown exception");
  }
}
