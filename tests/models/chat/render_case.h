#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "models/chat/chat_template.h"

namespace strata::models::chat {

// A template, the variables it is rendered with and what it renders. `variables` is a JSON
// object with ChatInputs' fields (messages, tools, add_generation_prompt, bos_token, eos_token,
// extra); `expected` is null where rendering raises, and `error` then holds the reference's
// message.
struct RenderCase {
  const char* name;
  const char* source;
  const char* variables;
  const char* expected;
  const char* error;
};

inline ChatInputs inputs_of(std::string_view variables_json) {
  const auto variables = nlohmann::json::parse(variables_json);
  ChatInputs inputs;
  inputs.messages = variables.value("messages", nlohmann::json::array());
  inputs.tools = variables.value("tools", nlohmann::json());
  inputs.add_generation_prompt = variables.value("add_generation_prompt", false);
  inputs.bos_token = variables.value("bos_token", "");
  inputs.eos_token = variables.value("eos_token", "");
  inputs.extra = variables.value("extra", nlohmann::json());
  return inputs;
}

inline std::string render(std::string_view source, std::string_view variables_json = "{}") {
  return ChatTemplate::parse(source, "test template").render(inputs_of(variables_json));
}

inline void expect_renders(const RenderCase& c) {
  SCOPED_TRACE(c.name);
  if (c.expected != nullptr) {
    EXPECT_EQ(render(c.source, c.variables), c.expected);
    return;
  }
  // The reference raises: so does strata, as a TemplateError (or UserError at parse time).
  EXPECT_THROW(render(c.source, c.variables), UserError) << "the reference raised: " << c.error;
}

}  // namespace strata::models::chat
