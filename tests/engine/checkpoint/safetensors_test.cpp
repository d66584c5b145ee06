// The safetensors reader and writer: round trips in pieces, a file laid out byte by byte as the
// format specifies, and every damaged file refused naming the file and the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <numeric>

#include "base/error.h"
#include "engine/checkpoint/safetensors.h"
#include "tests/aio/aio_test_support.h"

namespace strata::engine::checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class Safetensors : public ::testing::Test {
 protected:
  // A file of an 8-byte little-endian header length, the header, then `data`.
  std::filesystem::path raw(const std::string& name, const std::string& header,
                            const std::string& data, std::int64_t length = -1) {
    const std::uint64_t n = length < 0 ? header.size() : static_cast<std::uint64_t>(length);
    std::string bytes;
    for (int i = 0; i < 8; ++i)
      bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    bytes += header + data;
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }

  std::string refusal(const std::filesystem::path& path) {
    try {
      SafetensorsFile::open(path);
    } catch (const UserError& error) {
      return error.what();
    }
    ADD_FAILURE() << path << " opened, but should be refused";
    return "";
  }

  static aio::EngineOptions io_options() {
    aio::EngineOptions options;
    options.verify_checksums = false;  // the writer's callers keep one CRC32C per file
    return options;
  }

  aio::testing::TempDir temp_;
  const std::filesystem::path& dir_ = temp_.path();
  aio::Engine io_{io_options()};
};

TEST_F(Safetensors, WrittenInPiecesReadsBackTheSameBytes) {
  std::vector<float> weights(6);
  std::iota(weights.begin(), weights.end(), 1.5f);
  std::vector<std::uint16_t> bias = {1, 2, 3, 4, 5};
  const auto path = dir_ / "model.safetensors";
  {
    SafetensorsWriter writer(io_, path,
                             {{"h.0.weight", Dtype::f32, {2, 3}},
                              {"h.0.bias", Dtype::bf16, {5}},
                              {"empty", Dtype::i64, {0, 4}}},
                             {{"format", "pt"}});
    const auto weight_bytes = std::as_bytes(std::span(weights));
    writer.append(weight_bytes.first(7));  // pieces that cut elements in two
    writer.append(weight_bytes.subspan(7));
    writer.append(std::as_bytes(std::span(bias)));
    EXPECT_EQ(writer.bytes_left(), 0);
    writer.finish();
  }
  SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const TensorEntry* weight = file.find("h.0.weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype, Dtype::f32);
  EXPECT_EQ(weight->shape, (std::vector<std::int64_t>{2, 3}));
  std::vector<float> back(6);
  std::memcpy(back.data(), file.data(*weight).data(), 24);
  EXPECT_EQ(back, weights);
  const TensorEntry* b = file.find("h.0.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->begin, 24);
  EXPECT_EQ(std::memcmp(file.data(*b).data(), bias.data(), 10), 0);
  EXPECT_EQ(file.find("empty")->bytes(), 0);
  EXPECT_EQ(file.find("missing"), nullptr);
  // The data section starts on a multiple of 8 bytes, as the safetensors library writes it.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + header_bytes + 34);
}

TEST_F(Safetensors, AFileLaidOutAsTheFormatSaysReads) {
  // {"__metadata__":...} first, offsets relative to the data section, header padded with spaces.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}}  )";
  std::string data(12, '\0');
  data[8] = 7;
  SafetensorsFile file = SafetensorsFile::open(raw("hand.safetensors", header, data));
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");  // in the order of their bytes
  EXPECT_EQ(file.tensors()[1].dtype, Dtype::i32);
  EXPECT_EQ(std::to_integer<int>(file.data(file.tensors()[1])[0]), 7);
}

TEST_F(Safetensors, DamagedFilesAreRefusedNamingTheFileAndTheTensor) {
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_THAT(refusal(raw("short.safetensors", good, std::string(5, '\0'))),
              AllOf(HasSubstr("short.safetensors"), HasSubstr("the tensors end at byte 8"),
                    HasSubstr("holds 5 bytes of data")));
  EXPECT_THAT(refusal(raw("length.safetensors", good, "", 1 << 20)),
              HasSubstr("header length says 1048576 bytes"));
  EXPECT_THAT(refusal(raw("json.safetensors", "{\"w\": [", "")),
              HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(
      refusal(raw("dtype.safetensors", R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})",
                  std::string(8, '\0'))),
      HasSubstr("tensor \"w\": dtype \"F12\" is not one strata reads"));
  EXPECT_THAT(
      refusal(raw("shape.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                  std::string(8, '\0'))),
      HasSubstr("tensor \"w\": data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12"));
  EXPECT_THAT(refusal(raw("hole.safetensors",
                          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
                          std::string(5, '\0'))),
              HasSubstr("tensor \"b\" starts at byte 3 of the data, but the tensor before it "
                        "ends at 2"));
  EXPECT_THAT(refusal(raw("twice.safetensors",
                          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                          R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                          std::string(2, '\0'))),
              HasSubstr("the header names \"a\" twice"));
  EXPECT_THAT(refusal(raw("meta.safetensors", R"({"__metadata__":{"step":3}})", "")),
              HasSubstr("__metadata__.step is not a string"));
  EXPECT_THAT(refusal(raw("negative.safetensors",
                          R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "")),
              HasSubstr("tensor \"w\": shape holds -1"));
  std::ofstream(dir_ / "tiny.safetensors") << "abc";
  EXPECT_THAT(refusal(dir_ / "tiny.safetensors"), HasSubstr("less than a header length"));
  EXPECT_THAT(refusal(dir_ / "absent.safetensors"),
              AllOf(HasSubstr("absent.safetensors"), HasSubstr("cannot be opened")));
}

TEST_F(Safetensors, AWriterThatDoesNotFinishLeavesNoFile) {
  const auto path = dir_ / "partial.safetensors";
  {
    SafetensorsWriter writer(io_, path, {{"w", Dtype::f32, {4}}});
    std::array<float, 2> half = {1, 2};
    writer.append(std::as_bytes(std::span(half)));
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(SafetensorsWriter(io_, dir_ / "no/such/dir/x.safetensors", {}), UserError);
}

}  // namespace
}  // namespace strata::engine::checkpoint
