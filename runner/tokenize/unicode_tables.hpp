#pragma once
// The Unicode data the tokenizers need, generated into unicode_tables.cpp by
// scripts/gen_unicode_tables.py (which records the Unicode version). Every table is sorted
// by its first field, for binary search.
#include <cstddef>
#include <cstdint>

namespace axonn::tokenize::tables {

struct CodePointRange {
  char32_t first, last;  // inclusive
};
struct CombiningClass {
  char32_t code_point;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t code_point, first, second;  // second == 0: a singleton decomposition
};
struct Composition {
  char32_t first, second, composite;
};

extern const CodePointRange letters[];
extern const size_t letters_count;
extern const CodePointRange numbers[];
extern const size_t numbers_count;
extern const CodePointRange white_space[];
extern const size_t white_space_count;
extern const CombiningClass combining_classes[];
extern const size_t combining_classes_count;
extern const Decomposition decompositions[];
extern const size_t decompositions_count;
extern const Composition compositions[];
extern const size_t compositions_count;
extern const char unicode_version[];

}  // namespace axonn::tokenize::tables
