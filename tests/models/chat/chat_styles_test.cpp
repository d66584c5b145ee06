// Small templates written in the style of the real ones (Qwen, Llama 3.1, Mistral, DeepSeek,
// Gemma), not copies of them. Each case's expected text is what @huggingface/jinja 0.5.11 (the
// Jinja of transformers.js) renders for the same template and variables, the variables' keys in
// byte order as nlohmann::json holds them; a case with an error is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"qwen_like_tools",
     "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' "
     "%}\n        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n    {{- \"# "
     "Tools\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool "
     "| tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools><|im_end|>\\n\" }}\n{%- elif "
     "messages[0].role == 'system' %}\n    {{- '<|im_start|>system\\n' + messages[0].content + "
     "'<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message.role == "
     "\"user\" or (message.role == \"system\" and not loop.first) %}\n        {{- '<|im_start|>' + "
     "message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n    {%- elif message.role == "
     "\"assistant\" %}\n        {%- set content = message.content %}\n        {%- if '</think>' in "
     "content %}\n            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n   "
     "     {%- endif %}\n        {{- '<|im_start|>assistant\\n' + content }}\n        {%- for "
     "tool_call in message.tool_calls or [] if tool_call.function is defined %}\n            {%- "
     "if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}\n            {{- "
     "'<tool_call>\\n{\"name\": \"' + tool_call.function.name + '\", \"arguments\": ' }}\n         "
     "   {{- tool_call.function.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n     "
     "   {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n "
     "       {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}{{- "
     "'<|im_start|>user' }}{%- endif %}\n        {{- '\\n<tool_response>\\n' + message.content + "
     "'\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "
     "\"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if "
     "add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking "
     "is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif "
     "%}\n{%- endif %}\n",
     R"jinja({"add_generation_prompt": true, "messages": [{"content": "You help.", "role": "system"}, {"content": "Time in Tokyo? 東京", "role": "user"}, {"content": "", "role": "assistant", "tool_calls": [{"function": {"arguments": {"zone": "Asia/Tokyo"}, "name": "get_time"}, "type": "function"}]}, {"content": "12:00", "role": "tool"}, {"content": "<think>\nIt is noon.\n</think>\n\nIt is 12:00 in Tokyo.", "role": "assistant"}], "tools": [{"function": {"description": "Current time", "name": "get_time", "parameters": {"properties": {"zone": {"type": "string"}}, "required": ["zone"], "type": "object"}}, "type": "function"}]})jinja",
     "<|im_start|>system\nYou help.\n\n# Tools\n<tools>\n{\"function\": {\"description\": "
     "\"Current time\", \"name\": \"get_time\", \"parameters\": {\"properties\": {\"zone\": "
     "{\"type\": \"string\"}}, \"required\": [\"zone\"], \"type\": \"object\"}}, \"type\": "
     "\"function\"}\n</tools><|im_end|>\n<|im_start|>user\nTime in Tokyo? "
     "東京<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
     "{\"zone\": "
     "\"Asia/Tokyo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n12:00\n</"
     "tool_response><|im_end|>\n<|im_start|>assistant\nIt is 12:00 in "
     "Tokyo.<|im_end|>\n<|im_start|>assistant\n",
     nullptr},
    {"qwen_like_no_tools",
     "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' "
     "%}\n        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n    {{- \"# "
     "Tools\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool "
     "| tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools><|im_end|>\\n\" }}\n{%- elif "
     "messages[0].role == 'system' %}\n    {{- '<|im_start|>system\\n' + messages[0].content + "
     "'<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message.role == "
     "\"user\" or (message.role == \"system\" and not loop.first) %}\n        {{- '<|im_start|>' + "
     "message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n    {%- elif message.role == "
     "\"assistant\" %}\n        {%- set content = message.content %}\n        {%- if '</think>' in "
     "content %}\n            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n   "
     "     {%- endif %}\n        {{- '<|im_start|>assistant\\n' + content }}\n        {%- for "
     "tool_call in message.tool_calls or [] if tool_call.function is defined %}\n            {%- "
     "if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}\n            {{- "
     "'<tool_call>\\n{\"name\": \"' + tool_call.function.name + '\", \"arguments\": ' }}\n         "
     "   {{- tool_call.function.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n     "
     "   {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n "
     "       {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}{{- "
     "'<|im_start|>user' }}{%- endif %}\n        {{- '\\n<tool_response>\\n' + message.content + "
     "'\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "
     "\"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if "
     "add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking "
     "is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif "
     "%}\n{%- endif %}\n",
     R"jinja({"add_generation_prompt": true, "extra": {"enable_thinking": false}, "messages": [{"content": "You help.", "role": "system"}, {"content": "Time in Tokyo? 東京", "role": "user"}]})jinja",
     "<|im_start|>system\nYou help.<|im_end|>\n<|im_start|>user\nTime in Tokyo? "
     "東京<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
     nullptr},
    {"llama_like",
     "{{- bos_token }}\n{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" "
     "%}{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
     "messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- "
     "set system_message = \"\" %}\n{%- endif %}\n{{- "
     "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Today Date: \" + date_string "
     "+ \"\\n\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages "
     "%}\n    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
     "message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt "
     "%}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n",
     R"jinja({"add_generation_prompt": true, "bos_token": "<|begin_of_text|>", "messages": [{"content": "  Sys.  ", "role": "system"}, {"content": " Hi there \n", "role": "user"}]})jinja",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: 26 Jul "
     "2024\n\nSys.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     nullptr},
    {"mistral_like",
     R"jinja({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})jinja",
     R"jinja({"bos_token": "<s>", "eos_token": "</s>", "messages": [{"content": "A", "role": "user"}, {"content": "B", "role": "assistant"}, {"content": "C", "role": "user"}]})jinja",
     R"jinja(<s>[INST] A [/INST]B</s>[INST] C [/INST])jinja", nullptr},
    {"mistral_like_raises",
     R"jinja({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})jinja",
     R"jinja({"bos_token": "<s>", "eos_token": "</s>", "messages": [{"content": "A", "role": "user"}, {"content": "C", "role": "user"}]})jinja",
     nullptr, "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"deepseek_like",
     R"jinja({% set ns = namespace(system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- elif message['role'] == 'assistant' and message['content'] is not none %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt %}{{'<｜Assistant｜>'}}{% endif %})jinja",
     R"jinja({"add_generation_prompt": true, "bos_token": "<｜begin▁of▁sentence｜>", "messages": [{"content": "One.", "role": "system"}, {"content": "Two.", "role": "system"}, {"content": "Q 😀", "role": "user"}, {"content": "A", "role": "assistant"}]})jinja",
     "<｜begin▁of▁sentence｜>One.\n\nTwo.<｜User｜>Q "
     "😀<｜Assistant｜>A<｜end▁of▁sentence｜><｜Assistant｜>",
     nullptr},
    {"gemma_like_parts",
     "{{ bos_token }}\n{%- for message in messages -%}\n    {%- set role = \"model\" if "
     "message['role'] == 'assistant' else message['role'] -%}\n    {{ '<start_of_turn>' + role + "
     "'\\n' }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim "
     "}}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in "
     "message['content'] -%}\n            {%- if item['type'] == 'image' -%}{{ '<start_of_image>' "
     "}}{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}\n        {%- "
     "endfor -%}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if "
     "add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}\n",
     R"jinja({"add_generation_prompt": true, "bos_token": "<bos>", "messages": [{"content": [{"type": "image"}, {"text": " What is this? ", "type": "text"}], "role": "user"}, {"content": "A cat.", "role": "assistant"}]})jinja",
     "<bos><start_of_turn>user\n<start_of_image>What is "
     "this?<end_of_turn>\n<start_of_turn>model\nA cat.<end_of_turn>\n<start_of_turn>model\n",
     nullptr},
};

TEST(ChatTemplateStyles, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
