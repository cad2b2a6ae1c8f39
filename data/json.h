/* A small JSON reader (RFC 8259) for tokenizer.json files and JSON Lines corpora: the whole text is
 * parsed into a tree of JsonValue. Strings are decoded to UTF-8 (\uXXXX escapes included; a lone
 * surrogate becomes its 3-byte form, as WTF-8 does) and NUL-terminated, with their length kept as
 * they may hold NUL bytes. Object members keep their order; lookup is linear. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum JsonType { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    bool boolean;
    double number;
    char *str;       /* JSON_STRING: decoded bytes, NUL-terminated */
    size_t len;      /* its length; for arrays and objects the number of items */
    struct JsonValue *items; /* JSON_ARRAY / JSON_OBJECT: the values */
    char **keys;     /* JSON_OBJECT: the member names (decoded, NUL-terminated) */
} JsonValue;

/* Parses text[0, n) (one value, surrounded by white space only). False with "line L, column C:
 * what" in err on any problem; *out is then NULL. */
bool json_parse(const char *text, size_t n, JsonValue **out, char *err, size_t errlen);
void json_free(JsonValue *v);

/* The member `key` of an object (NULL when v is not an object or has no such member). */
const JsonValue *json_get(const JsonValue *v, const char *key);
/* The member as a string / bool, or NULL / dflt when missing, null or of another type. */
const char *json_get_str(const JsonValue *v, const char *key);
bool json_get_bool(const JsonValue *v, const char *key, bool dflt);

#ifdef __cplusplus
}
#endif
