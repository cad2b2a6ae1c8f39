/* Element types and the host-side bf16 conversions. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum DType { GDP_F32 = 0, GDP_F64 = 1, GDP_BF16 = 2, GDP_I32 = 3 } DType;

static inline size_t dtype_size(DType dt) {
    switch (dt) {
    case GDP_F32: return 4;
    case GDP_F64: return 8;
    case GDP_BF16: return 2;
    case GDP_I32: return 4;
    }
    return 0;
}

static inline const char *dtype_name(DType dt) {
    switch (dt) {
    case GDP_F32: return "f32";
    case GDP_F64: return "f64";
    case GDP_BF16: return "bf16";
    case GDP_I32: return "i32";
    }
    return "?";
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet: the same rounding as __float2bfloat16_rn on the GPU. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
