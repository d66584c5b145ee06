// Values made from JSON as transformers.js makes them, and JavaScript's equality.
#include "models/chat/jinja_value.h"

#include <gtest/gtest.h>

namespace strata::models::chat::jinja {
namespace {

TEST(JinjaValue, JsonObjectsKeepTheirOrderWithIntegerKeysFirst) {
  const auto ordered = nlohmann::ordered_json::parse(R"({"type": "f", "10": 1, "a": 2, "2": 3})");
  EXPECT_EQ(to_json(from_json(ordered), {}, true), R"({"2": 3, "10": 1, "type": "f", "a": 2})");
  // A std::map-backed nlohmann::json has already put its keys in byte order.
  const auto sorted = nlohmann::json::parse(R"({"type": "f", "a": 2})");
  EXPECT_EQ(to_json(from_json(sorted), {}, true), R"({"a": 2, "type": "f"})");
}

TEST(JinjaValue, WholeNumbersAreIntegers) {
  const Value values = from_json(nlohmann::json::parse("[1.0, 1.5, -0.0, 3]"));
  EXPECT_EQ(values.items()[0].kind, Kind::integer);
  EXPECT_EQ(values.items()[1].kind, Kind::floating);
  EXPECT_EQ(to_output(values), "[1, 1.5, 0, 3]");
}

TEST(JinjaValue, EqualityIsJavaScripts) {
  const Value list = Value::list({Value::integer(1)});
  EXPECT_TRUE(loose_equals(Value::string("1"), Value::integer(1)));
  EXPECT_TRUE(loose_equals(Value::none(), Value{}));
  EXPECT_FALSE(loose_equals(Value::none(), Value::integer(0)));
  EXPECT_TRUE(loose_equals(list, list));
  EXPECT_FALSE(loose_equals(list, Value::list({Value::integer(1)})));
  EXPECT_TRUE(loose_equals(list, Value::string("1")));
  EXPECT_FALSE(strict_equals(Value::string("1"), Value::integer(1)));
  EXPECT_TRUE(strict_equals(Value::integer(2), Value::floating(2)));
}

}  // namespace
}  // namespace strata::models::chat::jinja
