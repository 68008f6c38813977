#pragma once
// SentencePiece .model files (Llama 2, Mistral) through libsentencepiece, the library that
// made them: encode, decode, the vocabulary and eos are the model's own.
#include <memory>
#include <string>

#include "runner/tokenize/tokenizer.hpp"

namespace axonn {

std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::string& path);

}  // namespace axonn
