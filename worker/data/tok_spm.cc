// tok_spm — the C++ side of tok.h. Every sentencepiece call is wrapped so that
// a util::Status or a C++ exception becomes a TOK_E* code and a message.
#include "worker/data/tok.h"

#include "common/hash.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

// sentencepiece's own log threshold (0 info .. 3 fatal). Exported by the
// library but not declared in its installed headers.
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
} // namespace logging
} // namespace sentencepiece

// Quiet means quiet: sentencepiece's own messages never reach stderr. Its
// errors still come back, as Status text in our message.
static void silence_library() { sentencepiece::logging::SetMinLogLevel(3); }

struct tok {
    sentencepiece::SentencePieceProcessor sp;
    uint64_t hash;
    int vocab;
};

static int tok_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

extern "C" void tok_train_opts_init(tok_train_opts *o) {
    std::memset(o, 0, sizeof *o);
    o->kind = TOK_UNIGRAM;
    o->vocab = 8192;
    o->character_coverage = 1.0;
    o->threads = 2;
    o->hard_vocab_limit = 1;
    o->quiet = 1;
}

namespace {

// Feeds borrowed C strings to the trainer without copying the corpus twice.
class CStringIterator : public sentencepiece::SentenceIterator {
  public:
    CStringIterator(const char *const *s, size_t n) : s_(s), n_(n), i_(0) { load(); }
    bool done() const override { return i_ >= n_; }
    void Next() override {
        ++i_;
        load();
    }
    const std::string &value() const override { return cur_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    void load() {
        if (i_ < n_) cur_.assign(s_[i_] ? s_[i_] : "");
    }
    const char *const *s_;
    size_t n_, i_;
    std::string cur_;
};

int train_common(const char *input, sentencepiece::SentenceIterator *it, const tok_train_opts *o,
                 char *err, size_t errlen) {
    if (!o || !o->prefix || !*o->prefix)
        return tok_fail(err, errlen, TOK_EINVAL, "tokenizer training: no output prefix given");
    if (o->vocab < 16 || o->vocab > 1000000)
        return tok_fail(err, errlen, TOK_EINVAL,
                        "tokenizer training: vocab %d out of range (valid: 16..1000000)", o->vocab);
    if (o->kind != TOK_UNIGRAM && o->kind != TOK_BPE)
        return tok_fail(err, errlen, TOK_EINVAL, "tokenizer training: kind must be unigram or bpe");
    double cov = o->character_coverage > 0 ? o->character_coverage : 1.0;
    if (cov > 1.0) cov = 1.0;
    char buf[64];
    std::unordered_map<std::string, std::string> kw;
    if (input) kw["input"] = input;
    kw["model_prefix"] = o->prefix;
    kw["model_type"] = o->kind == TOK_BPE ? "bpe" : "unigram";
    std::snprintf(buf, sizeof buf, "%d", o->vocab);
    kw["vocab_size"] = buf;
    std::snprintf(buf, sizeof buf, "%.6f", cov);
    kw["character_coverage"] = buf;
    std::snprintf(buf, sizeof buf, "%d", o->threads > 0 ? o->threads : 2);
    kw["num_threads"] = buf;
    kw["pad_id"] = "0";
    kw["unk_id"] = "1";
    kw["bos_id"] = "2";
    kw["eos_id"] = "3";
    kw["user_defined_symbols"] = TOK_SEP_PIECE;
    kw["byte_fallback"] = o->byte_fallback ? "true" : "false";
    kw["hard_vocab_limit"] = o->hard_vocab_limit ? "true" : "false";
    // Deterministic: the whole input, in file order.
    kw["input_sentence_size"] = "0";
    kw["shuffle_input_sentence"] = "false";
    kw["max_sentence_length"] = "65536";
    kw["minloglevel"] = o->quiet ? "3" : "0";
    try {
        if (o->quiet) silence_library();
        auto st = sentencepiece::SentencePieceTrainer::Train(kw, it);
        if (!st.ok())
            return tok_fail(err, errlen, TOK_ELIB, "sentencepiece training of %s: %s", o->prefix,
                            st.ToString().c_str());
    } catch (const std::bad_alloc &) {
        return tok_fail(err, errlen, TOK_ENOMEM, "sentencepiece training: out of memory");
    } catch (const std::exception &e) {
        return tok_fail(err, errlen, TOK_ELIB, "sentencepiece training: %s", e.what());
    } catch (...) {
        return tok_fail(err, errlen, TOK_ELIB, "sentencepiece training: unknown C++ exception");
    }
    return TOK_OK;
}

} // namespace

extern "C" int tok_train_file(const char *path, const tok_train_opts *o, char *err, size_t errlen) {
    if (!path || !*path)
        return tok_fail(err, errlen, TOK_EINVAL, "tokenizer training: no input file");
    FILE *f = std::fopen(path, "rb");
    if (!f) return tok_fail(err, errlen, TOK_EIO, "%s: %s", path, std::strerror(errno));
    std::fclose(f);
    return train_common(path, nullptr, o, err, errlen);
}

extern "C" int tok_train_sentences(const char *const *sents, size_t n, const tok_train_opts *o,
                                   char *err, size_t errlen) {
    if (!sents || n == 0)
        return tok_fail(err, errlen, TOK_EINVAL, "tokenizer training: no sentences given");
    try {
        CStringIterator it(sents, n);
        return train_common(nullptr, &it, o, err, errlen);
    } catch (const std::bad_alloc &) {
        return tok_fail(err, errlen, TOK_ENOMEM, "tokenizer training: out of memory");
    }
}

static uint64_t fnv1a_file(FILE *f, int *ok) {
    uint64_t h = FNV1A64_SEED;
    unsigned char buf[65536];
    size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a64(h, buf, k);
    *ok = !std::ferror(f);
    return h;
}

extern "C" int tok_load(tok_t **out, const char *model_path, char *err, size_t errlen) {
    if (!out || !model_path) return tok_fail(err, errlen, TOK_EINVAL, "tok_load: null argument");
    *out = nullptr;
    FILE *f = std::fopen(model_path, "rb");
    if (!f) return tok_fail(err, errlen, TOK_EIO, "%s: %s", model_path, std::strerror(errno));
    int ok = 0;
    uint64_t h = fnv1a_file(f, &ok);
    std::fclose(f);
    if (!ok) return tok_fail(err, errlen, TOK_EIO, "%s: read error", model_path);
    tok_t *t = new (std::nothrow) tok_t;
    if (!t) return tok_fail(err, errlen, TOK_ENOMEM, "tok_load: out of memory");
    try {
        silence_library();
        auto st = t->sp.Load(model_path);
        if (!st.ok()) {
            delete t;
            return tok_fail(err, errlen, TOK_ELIB, "%s: not a sentencepiece model: %s", model_path,
                            st.ToString().c_str());
        }
        t->hash = h;
        t->vocab = t->sp.GetPieceSize();
        if (t->sp.pad_id() != TOK_PAD || t->sp.unk_id() != TOK_UNK || t->sp.bos_id() != TOK_BOS ||
            t->sp.eos_id() != TOK_EOS || t->sp.PieceToId(TOK_SEP_PIECE) != TOK_SEP) {
            int pad = t->sp.pad_id(), unk = t->sp.unk_id(), bos = t->sp.bos_id(),
                eos = t->sp.eos_id(), sep = t->sp.PieceToId(TOK_SEP_PIECE);
            delete t;
            return tok_fail(err, errlen, TOK_EINVAL,
                            "%s: reserved ids are pad=%d unk=%d bos=%d eos=%d sep=%d; bf needs "
                            "pad=0 unk=1 bos=2 eos=3 sep=4 (train it with bfprep tokenizer)",
                            model_path, pad, unk, bos, eos, sep);
        }
    } catch (const std::exception &e) {
        delete t;
        return tok_fail(err, errlen, TOK_ELIB, "%s: %s", model_path, e.what());
    } catch (...) {
        delete t;
        return tok_fail(err, errlen, TOK_ELIB, "%s: unknown C++ exception", model_path);
    }
    *out = t;
    return TOK_OK;
}

extern "C" void tok_destroy(tok_t **self_p) {
    if (!self_p || !*self_p) return;
    delete *self_p;
    *self_p = nullptr;
}

extern "C" int tok_encode(const tok_t *t, const char *text, size_t len, int32_t **ids, size_t *n,
                          char *err, size_t errlen) {
    if (!t || (!text && len) || !ids || !n)
        return tok_fail(err, errlen, TOK_EINVAL, "tok_encode: null argument");
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int> v;
        auto st = t->sp.Encode(absl::string_view(text ? text : "", len), &v);
        if (!st.ok()) return tok_fail(err, errlen, TOK_ELIB, "encode: %s", st.ToString().c_str());
        int32_t *a = (int32_t *)std::malloc((v.size() ? v.size() : 1) * sizeof(int32_t));
        if (!a) return tok_fail(err, errlen, TOK_ENOMEM, "encode: out of memory");
        for (size_t i = 0; i < v.size(); i++) a[i] = v[i];
        *ids = a;
        *n = v.size();
    } catch (const std::bad_alloc &) {
        return tok_fail(err, errlen, TOK_ENOMEM, "encode: out of memory");
    } catch (const std::exception &e) {
        return tok_fail(err, errlen, TOK_ELIB, "encode: %s", e.what());
    } catch (...) {
        return tok_fail(err, errlen, TOK_ELIB, "encode: unknown C++ exception");
    }
    return TOK_OK;
}

extern "C" int tok_decode(const tok_t *t, const int32_t *ids, size_t n, char **text, char *err,
                          size_t errlen) {
    if (!t || (!ids && n) || !text)
        return tok_fail(err, errlen, TOK_EINVAL, "tok_decode: null argument");
    *text = nullptr;
    try {
        std::vector<int> v;
        v.reserve(n);
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= t->vocab)
                return tok_fail(err, errlen, TOK_EINVAL,
                                "decode: id %d at position %zu is outside [0, %d)", (int)ids[i], i,
                                t->vocab);
            v.push_back(ids[i]);
        }
        std::string s;
        auto st = t->sp.Decode(v, &s);
        if (!st.ok()) return tok_fail(err, errlen, TOK_ELIB, "decode: %s", st.ToString().c_str());
        char *c = (char *)std::malloc(s.size() + 1);
        if (!c) return tok_fail(err, errlen, TOK_ENOMEM, "decode: out of memory");
        std::memcpy(c, s.data(), s.size());
        c[s.size()] = 0;
        *text = c;
    } catch (const std::bad_alloc &) {
        return tok_fail(err, errlen, TOK_ENOMEM, "decode: out of memory");
    } catch (const std::exception &e) {
        return tok_fail(err, errlen, TOK_ELIB, "decode: %s", e.what());
    } catch (...) {
        return tok_fail(err, errlen, TOK_ELIB, "decode: unknown C++ exception");
    }
    return TOK_OK;
}

extern "C" int tok_vocab_size(const tok_t *t) { return t ? t->vocab : 0; }

extern "C" const char *tok_piece(const tok_t *t, int32_t id) {
    if (!t || id < 0 || id >= t->vocab) return "";
    try {
        return t->sp.IdToPiece(id).c_str();
    } catch (...) {
        return "";
    }
}

extern "C" uint64_t tok_hash(const tok_t *t) { return t ? t->hash : 0; }
