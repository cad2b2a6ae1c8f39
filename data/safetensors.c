#include "data/safetensors.h"

#include <errno.h>
#include <string.h>

#include "base/common.h"
#include "data/json.h"

/* A header larger than this is not a model index but a damaged or hostile file. */
#define SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

static int dtype_bytes(const char *dt) {
    if (!strcmp(dt, "F32")) return 4;
    if (!strcmp(dt, "F16") || !strcmp(dt, "BF16")) return 2;
    if (!strcmp(dt, "F64")) return 8;
    return 0;
}

static bool index_entry(SafeTensors *st, const char *name, const JsonValue *v, uint64_t data_bytes, char *err,
                        size_t errlen) {
    SafeTensor *t = &st->t[st->n];
    memset(t, 0, sizeof *t);
    const char *dt = json_get_str(v, "dtype");
    const JsonValue *shape = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    if (!dt || !shape || shape->type != JSON_ARRAY || !off || off->type != JSON_ARRAY || off->len != 2 ||
        shape->len > SAFETENSORS_MAX_DIMS) {
        snprintf(err, errlen, "%s: tensor '%s' lacks dtype, shape or data_offsets (or has over %d dims)", st->path,
                 name, SAFETENSORS_MAX_DIMS);
        return false;
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dt);
    t->ndim = (int)shape->len;
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const JsonValue *d = &shape->items[i];
        if (d->type != JSON_NUMBER || d->number < 0 || d->number > 1e15 || d->number != (double)(int64_t)d->number) {
            snprintf(err, errlen, "%s: tensor '%s' has a bad shape", st->path, name);
            return false;
        }
        t->shape[i] = (int64_t)d->number;
        t->numel *= t->shape[i];
    }
    for (int i = 0; i < 2; i++)
        if (off->items[i].type != JSON_NUMBER || off->items[i].number < 0) {
            snprintf(err, errlen, "%s: tensor '%s' has bad data_offsets", st->path, name);
            return false;
        }
    t->begin = (uint64_t)off->items[0].number, t->end = (uint64_t)off->items[1].number;
    int eb = dtype_bytes(t->dtype);
    if (t->end < t->begin || t->end > data_bytes || (eb && t->end - t->begin != (uint64_t)t->numel * (uint64_t)eb)) {
        snprintf(err, errlen,
                 "%s: tensor '%s' (%s, %lld elements) has data_offsets [%llu, %llu] that do not fit its size or the "
                 "file's %llu data bytes: the file is truncated or corrupt",
                 st->path, name, t->dtype, (long long)t->numel, (unsigned long long)t->begin,
                 (unsigned long long)t->end, (unsigned long long)data_bytes);
        return false;
    }
    t->name = (char *)xmalloc(strlen(name) + 1);
    strcpy(t->name, name);
    st->n++;
    return true;
}

bool safetensors_open(const char *path, SafeTensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    st->path = (char *)xmalloc(strlen(path) + 1);
    strcpy(st->path, path);
    st->f = fopen(path, "rb");
    if (!st->f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        safetensors_close(st);
        return false;
    }
    unsigned char len8[8];
    uint64_t hlen = 0, size = 0;
    if (fseeko(st->f, 0, SEEK_END) == 0) size = (uint64_t)ftello(st->f);
    rewind(st->f);
    if (fread(len8, 1, 8, st->f) != 8) {
        snprintf(err, errlen, "%s: shorter than a safetensors header (8 bytes)", path);
        safetensors_close(st);
        return false;
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen < 2 || hlen > SAFETENSORS_MAX_HEADER || 8 + hlen > size) {
        snprintf(err, errlen, "%s: header length %llu does not fit the file (%llu bytes): not a safetensors file",
                 path, (unsigned long long)hlen, (unsigned long long)size);
        safetensors_close(st);
        return false;
    }
    char *text = (char *)xmalloc(hlen + 1);
    JsonValue *root = NULL;
    char jerr[256];
    bool ok = fread(text, 1, hlen, st->f) == hlen;
    if (!ok) snprintf(err, errlen, "%s: cannot read its %llu-byte header", path, (unsigned long long)hlen);
    if (ok && !(ok = json_parse(text, hlen, &root, jerr, sizeof jerr)))
        snprintf(err, errlen, "%s: its header is not JSON: %s", path, jerr);
    if (ok && !(ok = root->type == JSON_OBJECT)) snprintf(err, errlen, "%s: its header is not a JSON object", path);
    if (ok) {
        st->data_start = 8 + hlen;
        st->t = (SafeTensor *)xcalloc(root->len + 1, sizeof(SafeTensor));
        for (size_t i = 0; ok && i < root->len; i++) {
            if (!strcmp(root->keys[i], "__metadata__")) continue;
            ok = index_entry(st, root->keys[i], &root->items[i], size - st->data_start, err, errlen);
        }
    }
    free(text);
    json_free(root);
    if (!ok) safetensors_close(st);
    return ok;
}

void safetensors_close(SafeTensors *st) {
    if (st->f) fclose(st->f);
    for (int i = 0; i < st->n; i++) free(st->t[i].name);
    free(st->t), free(st->path);
    memset(st, 0, sizeof *st);
}

const SafeTensor *safetensors_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static float half_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {
        f = (float)man * 0x1p-24f; /* zero and subnormals */
        uint32_t b;
        memcpy(&b, &f, 4);
        b |= sign;
        memcpy(&f, &b, 4);
        return f;
    }
    uint32_t b = sign | (exp == 31 ? 0xffu << 23 | man << 13 : (exp + 112) << 23 | man << 13);
    memcpy(&f, &b, 4);
    return f;
}

bool safetensors_read_f32(const SafeTensors *st, const SafeTensor *t, float *dst, char *err, size_t errlen) {
    const int eb = dtype_bytes(t->dtype);
    if (!eb) {
        snprintf(err, errlen, "%s: tensor '%s' has dtype %s; F32, F16, BF16 and F64 can be imported", st->path,
                 t->name, t->dtype);
        return false;
    }
    const size_t bytes = (size_t)(t->end - t->begin);
    unsigned char *raw = (unsigned char *)xmalloc(bytes + 1);
    bool ok = fseeko(st->f, (off_t)(st->data_start + t->begin), SEEK_SET) == 0 && fread(raw, 1, bytes, st->f) == bytes;
    if (!ok) {
        snprintf(err, errlen, "%s: cannot read tensor '%s' (%zu bytes): the file is truncated", st->path, t->name, bytes);
    } else {
        for (int64_t i = 0; i < t->numel; i++) {
            const unsigned char *p = raw + (size_t)i * (size_t)eb;
            if (eb == 4) {
                memcpy(&dst[i], p, 4);
            } else if (eb == 8) {
                double d;
                memcpy(&d, p, 8);
                dst[i] = (float)d;
            } else if (!strcmp(t->dtype, "BF16")) {
                uint32_t b = (uint32_t)(p[0] | p[1] << 8) << 16;
                memcpy(&dst[i], &b, 4);
            } else {
                dst[i] = half_to_f32((uint16_t)(p[0] | p[1] << 8));
            }
        }
    }
    free(raw);
    return ok;
}
