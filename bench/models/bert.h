// The BERT encoders of the evaluation harness (twin: the Bert* classes in
// bench/models/models.py), structured and named as Hugging Face's
// BertForSequenceClassification without its "bert." prefix:
//
//   embeddings.{word,position,token_type}_embeddings.weight, embeddings.LayerNorm.*
//   encoder.layer.N.attention.self.{query,key,value}.*
//   encoder.layer.N.attention.output.{dense,LayerNorm}.*
//   encoder.layer.N.intermediate.dense.*, encoder.layer.N.output.{dense,LayerNorm}.*
//   pooler.dense.*, classifier.*
//
//   bert_base   vocab 30522, hidden 768, 12 layers, 12 heads, intermediate
//               3072, 512 positions, 2 token types: 109,483,778 parameters
//   bert_small  the same with 4 layers, hidden 256, 4 heads, intermediate 1024
//
// Input: int64 token ids [batch, seq]; every token attends to every token (no
// padding mask), token types all 0, positions 0..seq-1. Output: logits
// [batch, classes] from the pooler (dense + tanh on token 0) and the
// classifier. GELU is the exact (erf) one; LayerNorm eps 1e-12.
//
// Dropout is 0 by default (BERT trains with 0.1): with 0 both sides compute
// the same function from the same weights and a benchmark iteration costs no
// random draws; BertConfig::dropout > 0 applies it where BERT does
// (embeddings, attention probabilities, both sublayer outputs, classifier).
// Attention is written with plain ops (matmul, softmax), identically in both
// languages. Initialization is the modules' defaults (Embedding N(0, 1),
// Linear kaiming_uniform(a=sqrt(5)), LayerNorm 1/0), not BERT's N(0, 0.02),
// so that libtorch and PyTorch draw the same numbers from the same seed.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp_bench {
namespace models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t max_positions = 512;
  int64_t type_vocab = 2;
  int64_t classes = 2;
  double layer_norm_eps = 1e-12;
  double dropout = 0.0;

  static BertConfig base() { return BertConfig(); }
  static BertConfig small() {
    BertConfig c;
    c.layers = 4;
    c.hidden = 256;
    c.heads = 4;
    c.intermediate = 1024;
    return c;
  }
};

inline torch::Tensor bert_dropout(const torch::Tensor& x, double p, bool training) {
  return p > 0 ? torch::dropout(x, p, training) : x;
}

inline torch::nn::LayerNorm bert_layer_norm(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.layer_norm_eps));
}

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& c) : dropout_(c.dropout) {
    word_ = register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden));
    position_ =
        register_module("position_embeddings", torch::nn::Embedding(c.max_positions, c.hidden));
    token_type_ =
        register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab, c.hidden));
    norm_ = register_module("LayerNorm", bert_layer_norm(c));
  }

  torch::Tensor forward(const torch::Tensor& ids) {
    const int64_t seq = ids.size(1);
    TORCH_CHECK(seq <= position_->options.num_embeddings(), "BERT input of ", seq,
                " tokens: at most ", position_->options.num_embeddings(), " (max positions)");
    auto positions = torch::arange(seq, ids.options().dtype(torch::kLong));
    auto types = torch::zeros_like(ids);
    auto x = word_->forward(ids) + token_type_->forward(types);
    x = x + position_->forward(positions);
    return bert_dropout(norm_->forward(x), dropout_, is_training());
  }

 private:
  double dropout_;
  torch::nn::Embedding word_{nullptr}, position_{nullptr}, token_type_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& c)
      : heads_(c.heads), head_dim_(c.hidden / c.heads), dropout_(c.dropout) {
    if (c.hidden % c.heads != 0) {
      throw std::invalid_argument("BERT hidden size " + std::to_string(c.hidden) +
                                  " is not a multiple of the head count " +
                                  std::to_string(c.heads));
    }
    query_ = register_module("query", torch::nn::Linear(c.hidden, c.hidden));
    key_ = register_module("key", torch::nn::Linear(c.hidden, c.hidden));
    value_ = register_module("value", torch::nn::Linear(c.hidden, c.hidden));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0), seq = x.size(1);
    auto heads = [&](const torch::Tensor& t) {  // [B, S, H*D] -> [B, H, S, D]
      return t.view({batch, seq, heads_, head_dim_}).permute({0, 2, 1, 3});
    };
    auto q = heads(query_->forward(x));
    auto k = heads(key_->forward(x));
    auto v = heads(value_->forward(x));
    auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim_));
    auto probs = bert_dropout(torch::softmax(scores, -1), dropout_, is_training());
    auto context = torch::matmul(probs, v);  // [B, H, S, D]
    return context.permute({0, 2, 1, 3}).reshape({batch, seq, heads_ * head_dim_});
  }

 private:
  int64_t heads_, head_dim_;
  double dropout_;
  torch::nn::Linear query_{nullptr}, key_{nullptr}, value_{nullptr};
};
TORCH_MODULE(BertSelfAttention);

// dense, dropout, LayerNorm(. + residual): the attention's and the FFN's output.
class BertSublayerOutputImpl : public torch::nn::Module {
 public:
  BertSublayerOutputImpl(const BertConfig& c, int64_t in) : dropout_(c.dropout) {
    dense_ = register_module("dense", torch::nn::Linear(in, c.hidden));
    norm_ = register_module("LayerNorm", bert_layer_norm(c));
  }

  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& residual) {
    return norm_->forward(bert_dropout(dense_->forward(h), dropout_, is_training()) + residual);
  }

 private:
  double dropout_;
  torch::nn::Linear dense_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(BertSublayerOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& c) {
    self_ = register_module("self", BertSelfAttention(c));
    output_ = register_module("output", BertSublayerOutput(c, c.hidden));
  }

  torch::Tensor forward(const torch::Tensor& x) { return output_->forward(self_->forward(x), x); }

 private:
  BertSelfAttention self_{nullptr};
  BertSublayerOutput output_{nullptr};
};
TORCH_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& c) {
    dense_ = register_module("dense", torch::nn::Linear(c.hidden, c.intermediate));
  }

  torch::Tensor forward(const torch::Tensor& x) { return torch::gelu(dense_->forward(x)); }

 private:
  torch::nn::Linear dense_{nullptr};
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& c) {
    attention_ = register_module("attention", BertAttention(c));
    intermediate_ = register_module("intermediate", BertIntermediate(c));
    output_ = register_module("output", BertSublayerOutput(c, c.intermediate));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto a = attention_->forward(x);
    return output_->forward(intermediate_->forward(a), a);
  }

 private:
  BertAttention attention_{nullptr};
  BertIntermediate intermediate_{nullptr};
  BertSublayerOutput output_{nullptr};
};
TORCH_MODULE(BertLayer);

class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const BertConfig& c) {
    torch::nn::ModuleList list;
    for (int64_t i = 0; i < c.layers; ++i) {
      layers_.push_back(BertLayer(c));
      list->push_back(layers_.back());
    }
    register_module("layer", list);
  }

  torch::Tensor forward(torch::Tensor x) {
    for (auto& layer : layers_) x = layer->forward(x);
    return x;
  }

 private:
  std::vector<BertLayer> layers_;
};
TORCH_MODULE(BertEncoder);

class BertPoolerImpl : public torch::nn::Module {
 public:
  explicit BertPoolerImpl(const BertConfig& c) {
    dense_ = register_module("dense", torch::nn::Linear(c.hidden, c.hidden));
  }

  // The first token's hidden state ([CLS]).
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::tanh(dense_->forward(x.select(1, 0)));
  }

 private:
  torch::nn::Linear dense_{nullptr};
};
TORCH_MODULE(BertPooler);

class BertForSequenceClassificationImpl : public torch::nn::Module {
 public:
  explicit BertForSequenceClassificationImpl(const BertConfig& c = BertConfig())
      : dropout_(c.dropout) {
    embeddings_ = register_module("embeddings", BertEmbeddings(c));
    encoder_ = register_module("encoder", BertEncoder(c));
    pooler_ = register_module("pooler", BertPooler(c));
    classifier_ = register_module("classifier", torch::nn::Linear(c.hidden, c.classes));
  }

  // ids: int64 [batch, seq] -> logits [batch, classes].
  torch::Tensor forward(torch::Tensor ids) {
    auto pooled = pooler_->forward(encoder_->forward(embeddings_->forward(ids)));
    return classifier_->forward(bert_dropout(pooled, dropout_, is_training()));
  }

 private:
  double dropout_;
  BertEmbeddings embeddings_{nullptr};
  BertEncoder encoder_{nullptr};
  BertPooler pooler_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(BertForSequenceClassification);

}  // namespace models
}  // namespace ddp_bench
