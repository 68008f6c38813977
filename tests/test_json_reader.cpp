// core/json_reader: RFC 8259 documents into a tree, malformed ones refused with where and why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json_reader.hpp"

namespace axonn {
namespace {

TEST(JsonReader, ReadsEveryKindOfValue) {
  const JsonValue v = parse_json(
      R"( {"a": [1, -2, 3.5, 1e3, -0], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "t": true, "f": false,
          "n": null, "o": {"deep": {"er": []}}, "big": 9007199254740993} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.object().size(), 7u);
  EXPECT_EQ(v.object()[0].first, "a");  // file order
  const JsonValue& a = v.at("a");
  EXPECT_EQ(a.at(0).integer(), 1);
  EXPECT_EQ(a.at(1).integer(), -2);
  EXPECT_EQ(a.at(2).number(), 3.5);
  EXPECT_EQ(a.at(3).number(), 1000.0);
  EXPECT_THROW(a.at(3).integer(), JsonError);  // 1e3 is written as a real number
  EXPECT_EQ(a.at(4).integer(), 0);
  EXPECT_EQ(v.at("s").string(), "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v.at("t").boolean());
  EXPECT_FALSE(v.at("f").boolean());
  EXPECT_TRUE(v.at("n").is_null());
  EXPECT_TRUE(v.at("o").at("deep").at("er").array().empty());
  EXPECT_EQ(v.at("big").integer(), 9007199254740993);  // exact beyond a double's 53 bits
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(JsonReader, WrongTypesAndMissingKeysNameWhatWasExpected) {
  const JsonValue v = parse_json(R"({"n": 1.5, "s": "x", "a": [1]})");
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const JsonError& e) {
      EXPECT_EQ(e.exit_code(), exit_code::bad_input);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { v.at("n").integer(); }), "expected an integer, got 1.5");
  EXPECT_EQ(message([&] { v.at("s").number(); }), "expected a number, got a string");
  EXPECT_EQ(message([&] { v.at("a").at(1); }), "expected an array of more than 1 elements, got 1");
  EXPECT_EQ(message([&] { v.at("zz"); }), "no key \"zz\"");
  EXPECT_EQ(message([&] { v.at("a").at("k"); }), "expected an object, got an array");
}

TEST(JsonReader, MalformedTextIsRefusedSayingWhere) {
  struct Case {
    std::string text, says;
  };
  const std::vector<Case> cases = {
      {"", "malformed JSON at byte 0 (line 1, column 1): expected a value, got the end of the text"},
      {"{\"a\": 1,}", "at byte 8 (line 1, column 9): expected a key in double quotes"},
      {"{\"a\" 1}", "at byte 5 (line 1, column 6): expected ':'"},
      {"[1 2]", "at byte 3 (line 1, column 4): expected ']'"},
      {"{\"a\": 1}\n x", "at byte 10 (line 2, column 2): text after the JSON value"},
      {"{\"a\": 1, \"a\": 2}", "at byte 9 (line 1, column 10): the key \"a\" appears twice in one object"},
      {"\"tab\there\"", "a control character in a string (escape it)"},
      {"\"\\x\"", "an unknown escape \\x"},
      {"\"\\ud83d\"", "a high surrogate without its low surrogate"},
      {"\"\\ude00\"", "a low surrogate without its high surrogate"},
      {"\"\\u12g4\"", "expected four hex digits after \\u"},
      {"\"open", "a string without its closing quote"},
      {"01", "text after the JSON value"},
      {"1.", "expected a digit after the decimal point"},
      {"1e", "expected a digit in the exponent"},
      {"-", "expected a value"},
      {"1e999", "a number out of range: 1e999"},
      {"tru", "expected true"},
      {std::string(100, '['), "nested deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    try {
      parse_json(c.text);
      ADD_FAILURE() << c.text << " parsed";
    } catch (const JsonError& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.text << ": " << e.what();
    }
  }
}

// A repeated key is found in a large object too (past 32 keys the reader hashes them), at the
// first key and the last, and 200k distinct keys parse in well under a second.
TEST(JsonReader, RepeatedKeysInLargeObjects) {
  auto object = [](int keys, const std::string& extra) {
    std::string text = "{";
    for (int i = 0; i < keys; ++i) text.append("\"k").append(std::to_string(i)).append("\": ").append(std::to_string(i)).append(",");
    text.append(extra).append("}");
    return text;
  };
  for (const std::string& repeat : {std::string("\"k0\": 1"), std::string("\"k39\": 1"), std::string("\"k40\": 1")}) {
    try {
      parse_json(object(41, repeat));
      ADD_FAILURE() << repeat << " parsed";
    } catch (const JsonError& e) {
      EXPECT_NE(std::string(e.what()).find("appears twice in one object"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_json(object(200000, "\"last\": 7")).at("last").integer(), 7);
}

}  // namespace
}  // namespace axonn
