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
      const int rc = app.exit(e);  // prints help, version, or the usage error
      return rc == 0 ? 0 : 2;
    }
    for (auto& [sub, action] : actions)
      if (sub->parsed()) action();
    return 0;
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
