"""The berts of the benchmark models (models.py), twins of bench/models/bert.h:
BERT's encoder, pooler and a classification head, with the same modules in the
same registration order as the C++ ones (dropout 0, see bert.h)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def bert_config(name):
    c = {"vocab_size": 30522, "hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072,
         "max_positions": 512, "type_vocab": 2, "classes": 2, "layer_norm_eps": 1e-12,
         "dropout": 0.0}
    if name == "bert_small":
        c.update(layers=4, hidden=256, heads=4, intermediate=1024)
    return c


def _dropout(x, p, training):
    return F.dropout(x, p, training) if p > 0 else x


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dropout = c["dropout"]
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden"])
        self.position_embeddings = nn.Embedding(c["max_positions"], c["hidden"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab"], c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=c["layer_norm_eps"])

    def forward(self, ids):
        seq = ids.shape[1]
        if seq > self.position_embeddings.num_embeddings:
            raise ValueError("BERT input of %d tokens: at most %d (max positions)"
                             % (seq, self.position_embeddings.num_embeddings))
        positions = torch.arange(seq, dtype=torch.long, device=ids.device)
        types = torch.zeros_like(ids)
        x = self.word_embeddings(ids) + self.token_type_embeddings(types)
        x = x + self.position_embeddings(positions)
        return _dropout(self.LayerNorm(x), self.dropout, self.training)


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        if c["hidden"] % c["heads"]:
            raise ValueError("BERT hidden size %d is not a multiple of the head count %d"
                             % (c["hidden"], c["heads"]))
        self.heads, self.head_dim = c["heads"], c["hidden"] // c["heads"]
        self.dropout = c["dropout"]
        self.query = nn.Linear(c["hidden"], c["hidden"])
        self.key = nn.Linear(c["hidden"], c["hidden"])
        self.value = nn.Linear(c["hidden"], c["hidden"])

    def forward(self, x):
        batch, seq = x.shape[0], x.shape[1]

        def heads(t):  # [B, S, H*D] -> [B, H, S, D]
            return t.view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)
        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = _dropout(torch.softmax(scores, -1), self.dropout, self.training)
        context = torch.matmul(probs, v)  # [B, H, S, D]
        return context.permute(0, 2, 1, 3).reshape(batch, seq, self.heads * self.head_dim)


class BertSublayerOutput(nn.Module):
    """dense, dropout, LayerNorm(. + residual): the attention's and the FFN's output."""

    def __init__(self, c, cin):
        super().__init__()
        self.dropout = c["dropout"]
        self.dense = nn.Linear(cin, c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        return self.LayerNorm(_dropout(self.dense(h), self.dropout, self.training) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSublayerOutput(c, c["hidden"])

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden"], c["intermediate"])

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSublayerOutput(c, c["intermediate"])

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c["layers"])])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden"], c["hidden"])

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))  # the first token ([CLS])


class BertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dropout = c["dropout"]
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = BertPooler(c)
        self.classifier = nn.Linear(c["hidden"], c["classes"])

    def forward(self, ids):  # int64 [batch, seq] -> logits [batch, classes]
        pooled = self.pooler(self.encoder(self.embeddings(ids)))
        return self.classifier(_dropout(pooled, self.dropout, self.training))
