// The built-in corpus: what a job trains on when it names no data. Exactly 1 MiB of
// English-like text, generated (not shipped) from a fixed seed with integer arithmetic only,
// so every platform and compiler produces the same bytes.
//
// It is made to be learnable by a tiny byte-level GPT in tens of steps: a small vocabulary
// of words (the unigram and bigram statistics are learned first), sentences from a small
// grammar, facts that always get the same answer, counting sequences and arithmetic with
// correct results (longer-range structure for more steps). Paragraphs are separated by a
// newline.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/data/token_data.hpp"

namespace axonn {
namespace {

constexpr size_t kCorpusBytes = size_t{1} << 20;
constexpr uint64_t kCorpusSeed = 20240520;

// splitmix64 as a generator: small, good enough, and fully specified.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, n) for n << 2^64 (the modulo bias is below 2^-50).
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(int percent) { return below(100) < percent; }
  template <typename T, size_t N>
  const T& pick(const T (&items)[N]) {
    return items[below(static_cast<int>(N))];
  }

 private:
  uint64_t state_;
};

const char* const kNames[] = {"Anna",  "Ben",  "Clara", "David", "Emma", "Finn",
                              "Grace", "Hugo", "Ivy",   "Jack",  "Lily", "Max"};
const char* const kAdjectives[] = {"big", "small",  "red",   "blue",   "green", "happy",
                                   "old", "little", "quiet", "bright", "brown", "lazy"};
const char* const kNouns[] = {"cat",   "dog",   "bird", "fox",  "tree",  "house", "ball", "boat",
                              "apple", "river", "hill", "king", "horse", "fish",  "book", "star"};
const char* const kVerbs[] = {"saw",     "found",   "liked", "chased",   "painted",
                              "carried", "watched", "heard", "followed", "lost"};
const char* const kPlaces[] = {"in the garden",  "by the river",  "on the hill",   "under the tree",
                               "near the house", "in the forest", "at the market", "on the boat"};
const char* const kFeelings[] = {"happy", "sad", "tired", "hungry", "brave", "sleepy"};

// Questions that always get the same answer: memorizable, unlike the random sentences.
struct Fact {
  const char* question;
  const char* answer;
};
const Fact kFacts[] = {
    {"What color is the sky?", "The sky is blue."},
    {"What color is the grass?", "The grass is green."},
    {"What color is snow?", "Snow is white."},
    {"What color is the sun?", "The sun is yellow."},
    {"What does the cow say?", "The cow says moo."},
    {"What does the dog say?", "The dog says woof."},
    {"What does the cat say?", "The cat says meow."},
    {"What does the duck say?", "The duck says quack."},
    {"How many legs does a dog have?", "A dog has four legs."},
    {"How many legs does a bird have?", "A bird has two legs."},
    {"How many days are in a week?", "There are seven days in a week."},
    {"How many months are in a year?", "There are twelve months in a year."},
    {"Where do fish live?", "Fish live in the water."},
    {"Where do birds live?", "Birds live in the trees."},
    {"What do cows drink?", "Cows drink water."},
    {"What falls from the clouds?", "Rain falls from the clouds."},
};

const char* const kSayings[] = {
    "The quick brown fox jumps over the lazy dog.",
    "A stitch in time saves nine.",
    "An apple a day keeps the doctor away.",
    "The early bird catches the worm.",
    "All that glitters is not gold.",
    "Slow and steady wins the race.",
};

const char* const kNumberWords[] = {"zero",     "one",     "two",     "three",     "four",     "five",     "six",
                                    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
                                    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
const char* const kDays[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

std::string noun_phrase(Rng& rng) {
  std::string s = "the ";
  if (rng.chance(60)) s += std::string(rng.pick(kAdjectives)) + " ";
  return s + rng.pick(kNouns);
}

// One sentence of the story grammar, ending in ". ".
std::string story_sentence(Rng& rng) {
  switch (rng.below(5)) {
    case 0:
      return capitalized(noun_phrase(rng)) + " " + rng.pick(kVerbs) + " " + noun_phrase(rng) + ". ";
    case 1:
      return capitalized(noun_phrase(rng)) + " " + rng.pick(kVerbs) + " " + noun_phrase(rng) + " " + rng.pick(kPlaces) +
             ". ";
    case 2:
      return std::string(rng.pick(kNames)) + " " + rng.pick(kVerbs) + " " + noun_phrase(rng) + " " + rng.pick(kPlaces) +
             ". ";
    case 3:
      return std::string(rng.pick(kNames)) + " said, \"I like " + noun_phrase(rng) + ".\" ";
    default:
      return std::string(rng.pick(kNames)) + " was " + rng.pick(kFeelings) + " " + rng.pick(kPlaces) + ". ";
  }
}

void story(Rng& rng, std::string& out) {
  if (rng.chance(40))
    out += "Once upon a time, " + std::string(rng.pick(kNames)) + " lived " + rng.pick(kPlaces) + ". ";
  for (int i = rng.between(3, 6); i > 0; --i) out += story_sentence(rng);
  if (rng.chance(30)) out += "And they all lived happily ever after.";
}

void facts(Rng& rng, std::string& out) {
  for (int i = rng.between(2, 5); i > 0; --i) {
    const Fact& f = rng.pick(kFacts);
    out += std::string("Q: ") + f.question + " A: " + f.answer + " ";
  }
}

void counting(Rng& rng, std::string& out) {
  const int length = rng.between(4, 9);
  if (rng.chance(50)) {
    const int from = rng.between(0, 20 - length + 1);
    const int to = from + length - 1;
    out += std::string("Count from ") + kNumberWords[from] + " to " + kNumberWords[to] + ":";
    for (int k = from; k <= to; ++k) out += std::string(k == from ? " " : ", ") + kNumberWords[k];
  } else {
    static const int kSteps[] = {1, 1, 2, 5, 10};
    const int step = rng.pick(kSteps);
    const int from = rng.between(0, 50) * (step == 1 ? 1 : step);
    out += "Count by " + std::to_string(step) + ":";
    for (int k = 0; k < length; ++k) out += std::string(k == 0 ? " " : ", ") + std::to_string(from + k * step);
  }
  out += ".";
}

void arithmetic(Rng& rng, std::string& out) {
  for (int i = rng.between(3, 6); i > 0; --i) {
    switch (rng.below(3)) {
      case 0: {
        const int a = rng.between(0, 49), b = rng.between(0, 49);
        out += std::to_string(a) + " + " + std::to_string(b) + " = " + std::to_string(a + b) + ". ";
        break;
      }
      case 1: {
        const int a = rng.between(0, 49), b = rng.between(0, a);
        out += std::to_string(a) + " - " + std::to_string(b) + " = " + std::to_string(a - b) + ". ";
        break;
      }
      default: {
        const int a = rng.between(1, 10), b = rng.between(1, 10);
        out += std::to_string(a) + " x " + std::to_string(b) + " = " + std::to_string(a * b) + ". ";
        break;
      }
    }
  }
}

void sayings(Rng& rng, std::string& out) {
  switch (rng.below(3)) {
    case 0:
      out += rng.pick(kSayings);
      break;
    case 1:
      out += "The days of the week are";
      for (int d = 0; d < 7; ++d) out += std::string(d == 0 ? " " : ", ") + kDays[d];
      out += ".";
      break;
    default:
      out += "The alphabet: A B C D E F G H I J K L M N O P Q R S T U V W X Y Z.";
      break;
  }
}

std::string generate() {
  Rng rng(kCorpusSeed);
  std::string text;
  text.reserve(kCorpusBytes + 1024);
  while (text.size() < kCorpusBytes) {
    const int kind = rng.below(100);
    if (kind < 40) {
      story(rng, text);
    } else if (kind < 55) {
      facts(rng, text);
    } else if (kind < 70) {
      counting(rng, text);
    } else if (kind < 90) {
      arithmetic(rng, text);
    } else {
      sayings(rng, text);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    text += '\n';
  }
  text.resize(kCorpusBytes);
  return text;
}

}  // namespace

TokenData builtin_corpus() {
  // Generated once per process (a few milliseconds); thread-safe static initialization.
  static const std::string text = generate();
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return TokenData::from_tokens(
      std::move(tokens), "built-in corpus (byte-level English-like text, " + std::to_string(text.size()) + " tokens)");
}

}  // namespace axonn
