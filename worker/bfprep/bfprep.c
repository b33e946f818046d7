/* bfprep — prepares the real data sets from their Debian packages and trains
 * tokenizers. Progress goes to stderr; results are written atomically
 * (FILE.tmp, then rename), so an interrupted run leaves no half file. */
#include "common/errbuf.h"
#include "common/hash.h"
#include "common/opts.h"
#include "worker/data/data.h"
#include "worker/data/tok.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WN_DEFAULT_SRC "/usr/share/wordnet/data.noun"
#define FM_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define BIBLE_CMD "bible -f gen1:1-rev22:21"

static void vdie(int code, const char *fmt, va_list ap) __attribute__((noreturn));
static void vdie(int code, const char *fmt, va_list ap) {
    fputs("bfprep: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    exit(code);
}
static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(1, fmt, ap);
}
/* A command-line error: exit status BF_EX_USAGE (64), as every bf program. */
static void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(BF_EX_USAGE, fmt, ap);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *default_out(void) {
    const char *e = getenv("BF_DATA");
    return e && *e ? e : "./data";
}

/* mkdir -p */
static void mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) die("%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", buf, strerror(errno));
}

static void join(char *buf, size_t n, const char *a, const char *b) {
    if (snprintf(buf, n, "%s/%s", a, b) >= (int)n) die("%s/%s: path too long", a, b);
}

/* An output file written to PATH.tmp and renamed on close. */
typedef struct outfile {
    FILE *f;
    char path[4096], tmp[4200];
} outfile;

static void out_open(outfile *o, const char *path) {
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
    if (!(o->f = fopen(o->tmp, "w"))) die("%s: %s", o->tmp, strerror(errno));
}

static void out_close(outfile *o) {
    if (ferror(o->f) | (fclose(o->f) != 0)) {
        unlink(o->tmp);
        die("%s: write error", o->tmp);
    }
    if (rename(o->tmp, o->path) != 0) die("rename %s -> %s: %s", o->tmp, o->path, strerror(errno));
}

/* ---- the command line ---------------------------------------------------- */

/* What the commands are told: one struct for all four, each reading the
 * rows of its own table. */
typedef struct prep_args {
    const char *src, *out, *input;
    int min_class, vocab, type, format, byte_fallback, verbose, crop;
    double val_fraction;
    opt_list evals;
} prep_args;

#define PA(f) OPT_AT(prep_args, f)
#define OUT_ROW                                                                                    \
    { "out", 0, OPT_STR, 0, 0, PA(out), "DIR", "the data folder (default $BF_DATA, else ./data)" }
static const opt_spec wordnet_opts[] = {
    {"src", 0, OPT_STR, 0, 0, PA(src), "FILE", "WordNet's noun data file (" WN_DEFAULT_SRC ")"},
    OUT_ROW,
    {"min-class", 0, OPT_INT, 1, 1000000000, PA(min_class), "N",
     "drop classes with fewer examples (100)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};
static const opt_spec kjv_opts[] = {
    OUT_ROW,
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};
static const opt_spec fashion_opts[] = {
    {"src", 0, OPT_STR, 0, 0, PA(src), "DIR2", "the four IDX files (" FM_DEFAULT_SRC ")"},
    OUT_ROW,
    {"crop", 0, OPT_INT, 1, 28, PA(crop), "N",
     "write the N x N centre crops into DIR/fashion_mnist_cropN/ instead of linking"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};
#define TOK_MAX_EVALS 16
static const opt_spec tokenizer_opts[] = {
    {"input", 0, OPT_STR, 0, 0, PA(input), "FILE", "the training text (required)"},
    {"vocab", 0, OPT_INT, 16, 1000000, PA(vocab), "N", "pieces (required)"},
    {"out", 0, OPT_STR, 0, 0, PA(out), "PREFIX", "writes PREFIX.model (required)"},
    {"type", 0, OPT_CHOICE, 0, 0, PA(type), "unigram|bpe", "the model (unigram)"},
    {"format", 0, OPT_CHOICE, 0, 0, PA(format), "text|tsv",
     "tsv: trains on the text fields (default for *.tsv); text: on the lines before the "
     "validation tail"},
    {"val-fraction", 0, OPT_DOUBLE, 0, 1, PA(val_fraction), "F",
     "text input: the validation tail left out, below 1 (0.05, as data.val_fraction)"},
    {"byte-fallback", 0, OPT_FLAG, 0, 0, PA(byte_fallback), NULL,
     "unknown characters as their bytes"},
    {"eval", 0, OPT_LIST, 0, 0, PA(evals), "FILE",
     "print tokens per line and the unk rate on FILE (repeatable, at most 16)"},
    {"verbose", 0, OPT_FLAG, 0, 0, PA(verbose), NULL, "sentencepiece's own log"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* A command of bfprep: its name, entry, summary and table. */
typedef struct prep_cmd {
    const char *name;
    int (*run)(const prep_args *a);
    const char *summary;
    const opt_spec *opts;
} prep_cmd;

/* ---- wordnet ------------------------------------------------------------ */

/* WordNet 3.0 noun lexicographer files, from lexnames(5WN); used when the
 * package ships no lexnames file. */
static const char *const WN_NOUN_LEXNAMES[] = {
    [3] = "noun.Tops",        [4] = "noun.act",
    [5] = "noun.animal",      [6] = "noun.artifact",
    [7] = "noun.attribute",   [8] = "noun.body",
    [9] = "noun.cognition",   [10] = "noun.communication",
    [11] = "noun.event",      [12] = "noun.feeling",
    [13] = "noun.food",       [14] = "noun.group",
    [15] = "noun.location",   [16] = "noun.motive",
    [17] = "noun.object",     [18] = "noun.person",
    [19] = "noun.phenomenon", [20] = "noun.plant",
    [21] = "noun.possession", [22] = "noun.process",
    [23] = "noun.quantity",   [24] = "noun.relation",
    [25] = "noun.shape",      [26] = "noun.state",
    [27] = "noun.substance",  [28] = "noun.time",
};
#define WN_MAX_LEX 100

static void wn_lexnames(const char *src, char names[WN_MAX_LEX][64]) {
    for (int i = 0; i < WN_MAX_LEX; i++) {
        const char *b = i < (int)(sizeof WN_NOUN_LEXNAMES / sizeof *WN_NOUN_LEXNAMES)
                            ? WN_NOUN_LEXNAMES[i]
                            : NULL;
        snprintf(names[i], 64, "%s", b ? b : "");
        if (!b) snprintf(names[i], 64, "%02d", i);
    }
    /* lexnames next to data.noun wins over the built-in table. */
    char path[4096];
    snprintf(path, sizeof path, "%s", src);
    char *slash = strrchr(path, '/');
    if (slash)
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "lexnames");
    else
        snprintf(path, sizeof path, "lexnames");
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        int num;
        char name[64];
        if (sscanf(line, "%d %63s", &num, name) == 2 && num >= 0 && num < WN_MAX_LEX) {
            snprintf(names[num], 64, "%s", name);
            n++;
        }
    }
    fclose(f);
    fprintf(stderr, "bfprep: %d lexicographer names from %s\n", n, path);
}

typedef struct wn_entry {
    unsigned long offset;
    int lex;
    char *gloss;
} wn_entry;

static int cmd_wordnet(const prep_args *a) {
    const char *src = a->src ? a->src : WN_DEFAULT_SRC, *out = a->out ? a->out : default_out();
    long min_class = a->min_class;
    double t0 = now_s();
    FILE *f = fopen(src, "r");
    if (!f) die("%s: %s (install wordnet-base, or pass --src)", src, strerror(errno));
    char names[WN_MAX_LEX][64];
    wn_lexnames(src, names);
    wn_entry *e = NULL;
    size_t n = 0, cap = 0, lineno = 0, skipped_empty = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (len >= 2 && line[0] == ' ' && line[1] == ' ') continue; /* license header */
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        unsigned long off;
        int lex, consumed = 0;
        if (sscanf(line, "%8lu %2d %*c%n", &off, &lex, &consumed) != 2 || consumed == 0)
            die("%s:%zu: not a WordNet data line (expected 'OFFSET LEX_FILENUM SS_TYPE ...')", src,
                lineno);
        if (lex < 0 || lex >= WN_MAX_LEX)
            die("%s:%zu: lexicographer file number %d out of range", src, lineno, lex);
        char *bar = strstr(line, " | ");
        if (!bar) die("%s:%zu: no gloss (expected ' | ' before the gloss)", src, lineno);
        char *g = bar + 3;
        for (char *c = g; *c; c++)
            if (*c == '\t' || *c == '\r') *c = ' ';
        while (*g == ' ') g++;
        size_t gl = strlen(g);
        while (gl > 0 && g[gl - 1] == ' ') g[--gl] = 0;
        if (gl == 0) {
            skipped_empty++;
            continue;
        }
        if (!data_utf8_valid(g, gl)) die("%s:%zu: gloss is not valid UTF-8", src, lineno);
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            wn_entry *ne = realloc(e, cap * sizeof *e);
            if (!ne) die("out of memory");
            e = ne;
        }
        e[n].offset = off;
        e[n].lex = lex;
        if (!(e[n].gloss = strdup(g))) die("out of memory");
        n++;
    }
    if (ferror(f)) die("%s: read error", src);
    fclose(f);
    free(line);
    if (n == 0) die("%s: no synsets found", src);
    fprintf(stderr, "bfprep: %zu synsets read from %s (%zu with an empty gloss skipped)\n", n, src,
            skipped_empty);

    size_t count[WN_MAX_LEX] = {0};
    for (size_t i = 0; i < n; i++) count[e[i].lex]++;
    int kept = 0, dropped = 0;
    size_t dropped_ex = 0;
    for (int c = 0; c < WN_MAX_LEX; c++) {
        if (!count[c]) continue;
        if ((long)count[c] >= min_class)
            kept++;
        else {
            dropped++;
            dropped_ex += count[c];
            fprintf(stderr, "bfprep: dropping class %s (%zu examples < %ld)\n", names[c], count[c],
                    min_class);
        }
    }
    if (kept == 0) die("%s: no class has at least %ld examples", src, min_class);

    char dir[4096], path[4096];
    join(dir, sizeof dir, out, "wordnet");
    mkdirs(dir);
    static const char *split_name[3] = {"train", "val", "test"};
    outfile of[3];
    for (int s = 0; s < 3; s++) {
        char fname[32];
        snprintf(fname, sizeof fname, "%s.tsv", split_name[s]);
        join(path, sizeof path, dir, fname);
        out_open(&of[s], path);
    }
    size_t per[3] = {0}, per_class[3][WN_MAX_LEX];
    memset(per_class, 0, sizeof per_class);
    for (size_t i = 0; i < n; i++) {
        if ((long)count[e[i].lex] < min_class) continue;
        /* Split by a hash of the synset's offset: stable under any change of
         * the file's other contents or order. */
        char key[32];
        int kl = snprintf(key, sizeof key, "%08lu", e[i].offset);
        uint64_t h = fnv1a64(FNV1A64_SEED, key, (size_t)kl);
        h ^= h >> 29;
        unsigned b = (unsigned)(h % 10);
        int s = b < 8 ? 0 : b == 8 ? 1 : 2;
        fprintf(of[s].f, "%s\t%s\n", names[e[i].lex], e[i].gloss);
        per[s]++;
        per_class[s][e[i].lex]++;
    }
    for (int s = 0; s < 3; s++) out_close(&of[s]);
    for (size_t i = 0; i < n; i++) free(e[i].gloss);
    free(e);
    fprintf(stderr, "bfprep: %-20s %8s %8s %8s\n", "class", "train", "val", "test");
    for (int c = 0; c < WN_MAX_LEX; c++)
        if ((long)count[c] >= min_class)
            fprintf(stderr, "bfprep: %-20s %8zu %8zu %8zu\n", names[c], per_class[0][c],
                    per_class[1][c], per_class[2][c]);
    fprintf(stderr,
            "bfprep: wordnet: %d classes (%d dropped, %zu examples); train %zu, val %zu, test %zu "
            "-> %s (%.2f s)\n",
            kept, dropped, dropped_ex, per[0], per[1], per[2], dir, now_s() - t0);
    return 0;
}

/* ---- kjv ---------------------------------------------------------------- */

/* Length of a leading verse reference "[1-3]Book<chapter>:<verse> ", or 0. */
static size_t verse_ref_len(const char *s) {
    const char *p = s;
    if (*p >= '1' && *p <= '3') p++;
    const char *b = p;
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')) p++;
    if (p == b) return 0;
    const char *d = p;
    while (*p >= '0' && *p <= '9') p++;
    if (p == d || *p != ':') return 0;
    d = ++p;
    while (*p >= '0' && *p <= '9') p++;
    if (p == d || (*p != ' ' && *p != 0)) return 0;
    while (*p == ' ') p++;
    return (size_t)(p - s);
}

static int cmd_kjv(const prep_args *a) {
    const char *out = a->out ? a->out : default_out();
    double t0 = now_s();
    char dir[4096], path[4096];
    join(dir, sizeof dir, out, "kjv");
    mkdirs(dir);
    join(path, sizeof path, dir, "kjv.txt");
    fflush(NULL);
    FILE *p = popen(BIBLE_CMD " 2>&1", "r");
    if (!p) die("cannot run '%s': %s", BIBLE_CMD, strerror(errno));
    outfile of;
    out_open(&of, path);
    char *line = NULL, *verse = NULL;
    size_t lcap = 0, vlen = 0, vcap = 0, verses = 0, bytes = 0, lineno = 0;
    ssize_t len;
    char first_bad[256] = "";
    while ((len = getline(&line, &lcap, p)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        size_t r = verse_ref_len(line);
        const char *text = line + r;
        if (r == 0) {
            /* A wrapped continuation of the previous verse, or not bible output at all. */
            if (!verses && !vlen) {
                snprintf(first_bad, sizeof first_bad, "%s", line);
                break;
            }
            while (*text == ' ') text++;
            if (!*text) continue;
        } else if (vlen) {
            fprintf(of.f, "%.*s\n", (int)vlen, verse);
            bytes += vlen + 1;
            verses++;
            vlen = 0;
        }
        size_t tl = strlen(text);
        if (vlen + tl + 2 > vcap) {
            vcap = 2 * (vlen + tl + 2);
            char *nv = realloc(verse, vcap);
            if (!nv) die("out of memory");
            verse = nv;
        }
        if (r == 0 && vlen) verse[vlen++] = ' ';
        memcpy(verse + vlen, text, tl);
        vlen += tl;
        while (vlen > 0 && verse[vlen - 1] == ' ') vlen--;
    }
    if (vlen) {
        fprintf(of.f, "%.*s\n", (int)vlen, verse);
        bytes += vlen + 1;
        verses++;
    }
    free(line);
    free(verse);
    int st = pclose(p);
    if (first_bad[0] || st != 0 || verses == 0) {
        fclose(of.f);
        unlink(of.tmp);
        if (first_bad[0])
            die("'%s' printed '%s', not a verse (is bible-kjv installed?)", BIBLE_CMD, first_bad);
        die("'%s' failed (exit status %d, %zu verses); is bible-kjv installed?", BIBLE_CMD, st,
            verses);
    }
    out_close(&of);
    fprintf(stderr, "bfprep: kjv: %zu verses, %zu bytes -> %s (%.2f s)\n", verses, bytes, path,
            now_s() - t0);
    if (verses != 31102)
        fprintf(stderr, "bfprep: warning: expected 31102 verses in the KJV, got %zu\n", verses);
    return 0;
}

/* ---- fashion-mnist -------------------------------------------------------- */

static void be32_put(FILE *f, unsigned v) {
    fputc((int)(v >> 24) & 255, f), fputc((int)(v >> 16) & 255, f);
    fputc((int)(v >> 8) & 255, f), fputc((int)v & 255, f);
}

/* Writes im's centre crop of crop x crop pixels as uncompressed IDX files
 * `images` and `labels` (the names of the set's own files, without .gz). */
static void write_crop(const data_images_t *im, int crop, const char *images, const char *labels) {
    outfile o;
    out_open(&o, images);
    fputc(0, o.f), fputc(0, o.f), fputc(8, o.f), fputc(3, o.f);
    be32_put(o.f, (unsigned)im->n), be32_put(o.f, (unsigned)crop), be32_put(o.f, (unsigned)crop);
    int y0 = (im->rows - crop) / 2, x0 = (im->cols - crop) / 2;
    for (size_t i = 0; i < im->n; i++)
        for (int y = 0; y < crop; y++)
            fwrite(im->pixels + (i * (size_t)im->rows + (size_t)(y0 + y)) * (size_t)im->cols + x0,
                   1, (size_t)crop, o.f);
    out_close(&o);
    out_open(&o, labels);
    fputc(0, o.f), fputc(0, o.f), fputc(8, o.f), fputc(1, o.f);
    be32_put(o.f, (unsigned)im->n);
    for (size_t i = 0; i < im->n; i++) fputc(im->labels[i], o.f);
    out_close(&o);
}

static int cmd_fashion(const prep_args *a) {
    const char *src = a->src ? a->src : FM_DEFAULT_SRC, *out = a->out ? a->out : default_out();
    int crop = a->crop;
    double t0 = now_s();
    char dir[4096], name[64];
    snprintf(name, sizeof name, crop ? "fashion_mnist_crop%d" : "fashion_mnist", crop);
    join(dir, sizeof dir, out, name);
    mkdirs(dir);
    static const char *sets[2][2] = {{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                     {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    for (int s = 0; s < 2; s++) {
        char ip[4096], lp[4096], err[512];
        join(ip, sizeof ip, src, sets[s][0]);
        join(lp, sizeof lp, src, sets[s][1]);
        data_images_t *im;
        if (data_images_load(ip, lp, &im, err, sizeof err))
            die("%s (install dataset-fashion-mnist, or pass --src)", err);
        size_t hist[256] = {0};
        for (size_t i = 0; i < im->n; i++) hist[im->labels[i]]++;
        fprintf(stderr,
                "bfprep: fashion-mnist %s: %zu images %dx%d, %d classes (%zu..%zu per class)\n",
                s ? "test" : "train", im->n, im->rows, im->cols, im->n_classes, hist[0],
                hist[im->n_classes - 1]);
        if (im->n_classes != 10 || im->rows != 28 || im->cols != 28)
            die("%s: expected 28x28 images in 10 classes", ip);
        if (crop) {
            char cp[2][4096];
            for (int k = 0; k < 2; k++) {
                join(cp[k], sizeof cp[k], dir, sets[s][k]);
                cp[k][strlen(cp[k]) - 3] = 0; /* without .gz: written plain */
            }
            write_crop(im, crop, cp[0], cp[1]);
        }
        data_images_destroy(&im);
        for (int k = 0; !crop && k < 2; k++) {
            char from[4096], to[4096], abs_from[4096];
            join(from, sizeof from, src, sets[s][k]);
            join(to, sizeof to, dir, sets[s][k]);
            if (!realpath(from, abs_from)) die("%s: %s", from, strerror(errno));
            unlink(to);
            if (symlink(abs_from, to) != 0)
                die("symlink %s -> %s: %s", to, abs_from, strerror(errno));
        }
    }
    fprintf(stderr, "bfprep: fashion-mnist: validated, %s into %s (%.2f s)\n",
            crop ? "centre-cropped" : "linked", dir, now_s() - t0);
    return 0;
}

/* ---- tokenizer ------------------------------------------------------------ */

/* Collects the training sentences of FILE: a TSV's text fields, or a text
 * file's lines before its validation tail. Owners: *tsv or *txt (one set). */
static void load_sentences(const char *path, int is_tsv, double val_fraction, const char ***sents,
                           size_t *n, data_tsv_t **tsv, data_text_t **txt) {
    char err[1024];
    *tsv = NULL;
    *txt = NULL;
    if (is_tsv) {
        if (data_tsv_load(path, NULL, tsv, err, sizeof err)) die("%s", err);
        size_t k = (*tsv)->n * ((*tsv)->is_pair ? 2 : 1);
        const char **s = malloc(k * sizeof *s);
        if (!s) die("out of memory");
        size_t j = 0;
        for (size_t i = 0; i < (*tsv)->n; i++) {
            s[j++] = (*tsv)->text_a[i];
            if ((*tsv)->is_pair) s[j++] = (*tsv)->text_b[i];
        }
        *sents = s;
        *n = j;
    } else {
        if (data_text_load(path, val_fraction, txt, err, sizeof err)) die("%s", err);
        size_t k = (*txt)->val_start;
        const char **s = malloc((k ? k : 1) * sizeof *s);
        if (!s) die("out of memory");
        size_t j = 0;
        for (size_t i = 0; i < k; i++)
            if ((*txt)->line_bytes[i]) s[j++] = (*txt)->lines[i];
        *sents = s;
        *n = j;
    }
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void tok_eval(const tok_t *tok, const char *path, int is_tsv) {
    const char **s;
    size_t n;
    data_tsv_t *tsv;
    data_text_t *txt;
    load_sentences(path, is_tsv, 0.0, &s, &n, &tsv, &txt);
    size_t toks = 0, unk = 0, chars = 0;
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t k;
        char err[512];
        if (tok_encode(tok, s[i], strlen(s[i]), &ids, &k, err, sizeof err)) die("%s", err);
        for (size_t j = 0; j < k; j++) unk += ids[j] == TOK_UNK;
        toks += k;
        chars += strlen(s[i]);
        free(ids);
    }
    double dt = now_s() - t0;
    fprintf(stderr,
            "bfprep: eval %s: %zu lines, %.2f tokens/line, %.3f bytes/token, unk rate %.5f%% "
            "(%zu), encode %.0f lines/s\n",
            path, n, n ? (double)toks / (double)n : 0.0, toks ? (double)chars / (double)toks : 0.0,
            toks ? 100.0 * (double)unk / (double)toks : 0.0, unk, dt > 0 ? (double)n / dt : 0.0);
    free(s);
    data_tsv_destroy(&tsv);
    data_text_destroy(&txt);
}

static int cmd_tokenizer(const prep_args *a) {
    const char *input = a->input, *prefix = a->out;
    const char *const *evals = a->evals.v;
    int n_evals = a->evals.n;
    double val_fraction = a->val_fraction;
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.vocab = a->vocab;
    if (a->type >= 0) o.kind = a->type == 1 ? TOK_BPE : TOK_UNIGRAM;
    o.byte_fallback = a->byte_fallback;
    if (a->verbose) o.quiet = 0;
    if (!input || !prefix || !o.vocab)
        die_usage(
            "tokenizer: --input, --vocab and --out are required (see bfprep tokenizer --help)");
    if (val_fraction >= 1)
        die_usage("--val-fraction %g: expected a number in [0, 1)", val_fraction);
    const char *format = a->format == 0 ? "text" : a->format == 1 ? "tsv" : NULL;
    int is_tsv = format ? !strcmp(format, "tsv") : ends_with(input, ".tsv");
    o.prefix = prefix;
    const char **s;
    size_t n;
    data_tsv_t *tsv;
    data_text_t *txt;
    load_sentences(input, is_tsv, val_fraction, &s, &n, &tsv, &txt);
    if (n == 0) die("%s: no training text", input);
    fprintf(stderr, "bfprep: training a %s tokenizer, vocab %d, on %zu %s of %s%s\n",
            o.kind == TOK_BPE ? "bpe" : "unigram", o.vocab, n, is_tsv ? "texts" : "lines", input,
            is_tsv ? "" : " (the part before the validation tail)");
    double t0 = now_s();
    char err[1024];
    if (tok_train_sentences(s, n, &o, err, sizeof err)) die("%s", err);
    double dt = now_s() - t0;
    free(s);
    data_tsv_destroy(&tsv);
    data_text_destroy(&txt);
    char model[4096];
    if (snprintf(model, sizeof model, "%s.model", prefix) >= (int)sizeof model)
        die("--out: path too long");
    tok_t *tok;
    if (tok_load(&tok, model, err, sizeof err)) die("%s", err);
    fprintf(stderr, "bfprep: tokenizer %s: %d pieces, trained in %.2f s\n", model,
            tok_vocab_size(tok), dt);
    for (int i = 0; i < n_evals; i++)
        tok_eval(tok, evals[i], ends_with(evals[i], ".tsv") || (format && is_tsv));
    tok_destroy(&tok);
    return 0;
}

static const prep_cmd commands[] = {
    {"wordnet", cmd_wordnet,
     "WordNet noun glosses -> DIR/wordnet/{train,val,test}.tsv (label = lexname, text = gloss; "
     "classes with fewer than --min-class examples dropped; split 80/10/10 by a hash of the "
     "synset offset)",
     wordnet_opts},
    {"kjv", cmd_kjv, "runs `" BIBLE_CMD "` -> DIR/kjv/kjv.txt, one verse per line, no references",
     kjv_opts},
    {"fashion-mnist", cmd_fashion,
     "validates the four IDX files in DIR2 and links them into DIR/fashion_mnist/ (--crop N: "
     "writes their N x N centre crops into DIR/fashion_mnist_cropN/)",
     fashion_opts},
    {"tokenizer", cmd_tokenizer,
     "trains a sentencepiece model PREFIX.model (pad=0 unk=1 bos=2 eos=3 sep=4)", tokenizer_opts},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* bfprep --help: the commands and what each does. */
static void usage(FILE *f) {
    fputs("usage: bfprep COMMAND [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        fprintf(f, "  %-16s", commands[i].name);
        opts_wrap(f, commands[i].summary, 18, 18);
    }
    fputs("\n`bfprep COMMAND --help` lists its options. DIR defaults to $BF_DATA, else ./data.\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return BF_EX_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(c, commands[i].name)) continue;
        const char *evals[TOK_MAX_EVALS];
        prep_args a = {.min_class = 100,
                       .type = -1,
                       .format = -1,
                       .val_fraction = 0.05,
                       .evals = {evals, 0, TOK_MAX_EVALS}};
        char use[1024], prog[64];
        int n = snprintf(use, sizeof use, "usage: bfprep %s [options]\n  ", c);
        FILE *f = fmemopen(use + n, sizeof use - (size_t)n, "w");
        if (f) {
            opts_wrap(f, commands[i].summary, 2, 2);
            fclose(f);
        }
        snprintf(prog, sizeof prog, "bfprep %s", c);
        int rest = argc;
        int prc = opts_parse(prog, use, commands[i].opts, argc, argv, 2, &a, &rest);
        if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : BF_EX_USAGE;
        if (rest < argc) die_usage("%s: unexpected argument '%s'", c, argv[rest]);
        return commands[i].run(&a);
    }
    fprintf(stderr,
            "bfprep: unknown command '%s' (valid: wordnet, kjv, fashion-mnist, tokenizer)\n", c);
    return BF_EX_USAGE;
}
