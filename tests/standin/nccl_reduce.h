// Part of the NCCL stand-in (nccl.cpp includes it once, after its type and op enums):
// element types, the reduction of one buffer per rank in rank order 0, 1, 2, ... (so
// every rank computes the same bits), and what each collective reads and writes.
#pragma once
#include "half.h"

static size_t esize(int t) {
    switch (t) {
        case T_I8: case T_U8: return 1;
        case T_F16: case T_BF16: return 2;
        case T_I32: case T_U32: case T_F32: return 4;
        case T_I64: case T_U64: case T_F64: return 8;
        default: return 0;
    }
}

// Half types are reduced in float and rounded once, to nearest even.
struct F16 {
    uint16_t bits;
};
struct BF16 {
    uint16_t bits;
};
static float widen(F16 h) { return f16_to_f32(h.bits); }
static F16 narrow_f16(float x) { return F16{f32_to_f16(x)}; }
static float widen(BF16 h) { return bf16_to_f32(h.bits); }
static BF16 narrow_bf16(float x) { return BF16{f32_to_bf16(x)}; }

template <typename T> struct Elem {  // integers and the two IEEE types
    using Acc = T;
    static Acc get(const void* p, size_t i) { return ((const T*)p)[i]; }
    static void put(void* p, size_t i, Acc v) { ((T*)p)[i] = v; }
};
template <> struct Elem<F16> {
    using Acc = float;
    static Acc get(const void* p, size_t i) { return widen(((const F16*)p)[i]); }
    static void put(void* p, size_t i, Acc v) { ((F16*)p)[i] = narrow_f16(v); }
};
template <> struct Elem<BF16> {
    using Acc = float;
    static Acc get(const void* p, size_t i) { return widen(((const BF16*)p)[i]); }
    static void put(void* p, size_t i, Acc v) { ((BF16*)p)[i] = narrow_bf16(v); }
};

// Integer sums and products wrap (as on the GPU) instead of overflowing signed arithmetic.
template <typename A> static A add(A a, A b) {
    if constexpr (std::is_integral_v<A>)
        return (A)((std::make_unsigned_t<A>)a + (std::make_unsigned_t<A>)b);
    else
        return a + b;
}
template <typename A> static A mul(A a, A b) {
    if constexpr (std::is_integral_v<A>)
        return (A)((std::make_unsigned_t<A>)a * (std::make_unsigned_t<A>)b);
    else
        return a * b;
}

// out[i] = op over ranks 0, 1, ... of in[r][offset + i]. Average as NCCL computes it:
// floating types multiply every input by 1/n (rounded to the element type) and sum,
// integers sum and divide.
template <typename T>
static void reduce_into(void* out, const std::vector<const void*>& in, size_t offset,
                        size_t count, int op) {
    using E = Elem<T>;
    using A = typename E::Acc;
    const size_t n = in.size();
    A scale = A(1);
    if (op == OP_AVG && !std::is_integral_v<A>) {
        // 1/n as the element type holds it
        if constexpr (std::is_same_v<T, F16>)
            scale = widen(narrow_f16(1.0f / (float)n));
        else if constexpr (std::is_same_v<T, BF16>)
            scale = widen(narrow_bf16(1.0f / (float)n));
        else
            scale = (A)(1.0 / (double)n);
    }
    for (size_t i = 0; i < count; ++i) {
        A acc = E::get(in[0], offset + i);
        if (op == OP_AVG && !std::is_integral_v<A>) acc = mul(acc, scale);
        for (size_t r = 1; r < n; ++r) {
            A x = E::get(in[r], offset + i);
            switch (op) {
                case OP_SUM: acc = add(acc, x); break;
                case OP_PROD: acc = mul(acc, x); break;
                case OP_MAX: acc = std::max(acc, x); break;
                case OP_MIN: acc = std::min(acc, x); break;
                case OP_AVG: acc = std::is_integral_v<A> ? add(acc, x) : add(acc, mul(x, scale));
            }
        }
        if constexpr (std::is_integral_v<A>)
            if (op == OP_AVG) acc = (A)(acc / (A)n);
        E::put(out, i, acc);
    }
}

static void reduce_typed(int type, void* out, const std::vector<const void*>& in, size_t off,
                         size_t count, int op) {
    switch (type) {
        case T_I8: return reduce_into<int8_t>(out, in, off, count, op);
        case T_U8: return reduce_into<uint8_t>(out, in, off, count, op);
        case T_I32: return reduce_into<int32_t>(out, in, off, count, op);
        case T_U32: return reduce_into<uint32_t>(out, in, off, count, op);
        case T_I64: return reduce_into<int64_t>(out, in, off, count, op);
        case T_U64: return reduce_into<uint64_t>(out, in, off, count, op);
        case T_F16: return reduce_into<F16>(out, in, off, count, op);
        case T_F32: return reduce_into<float>(out, in, off, count, op);
        case T_F64: return reduce_into<double>(out, in, off, count, op);
        case T_BF16: return reduce_into<BF16>(out, in, off, count, op);
    }
}

// ---- what each collective reads and writes --------------------------------------------

static bool has_op(int kind) {
    return kind == ALL_REDUCE || kind == REDUCE || kind == REDUCE_SCATTER;
}
static bool has_root(int kind) { return kind == BROADCAST || kind == REDUCE; }

// The bytes a rank sends and receives in a collective (0 where it passes none).
static void extents(const Desc& d, int rank, int n, size_t* send, size_t* recv) {
    size_t b = d.count * esize(d.type);
    switch (d.kind) {
        case ALL_REDUCE: *send = b; *recv = b; break;
        case BROADCAST: *send = rank == d.root ? b : 0; *recv = b; break;
        case REDUCE: *send = b; *recv = rank == d.root ? b : 0; break;
        case ALL_GATHER: *send = b; *recv = b * (size_t)n; break;
        case REDUCE_SCATTER: *send = b * (size_t)n; *recv = b; break;
    }
}

static std::string describe(const Desc& d) {
    char buf[160];
    int k = snprintf(buf, sizeof buf, "%s(count %zu, %s", KIND_NAME[d.kind], d.count,
                     TYPE_NAME[d.type]);
    if (has_op(d.kind)) k += snprintf(buf + k, sizeof buf - (size_t)k, ", %s", OP_NAME[d.op]);
    if (has_root(d.kind)) k += snprintf(buf + k, sizeof buf - (size_t)k, ", root %d", d.root);
    snprintf(buf + k, sizeof buf - (size_t)k, ")");
    return buf;
}

// This rank's output of a collective whose every rank has arrived (empty: none).
static std::vector<char> compute(const Round& rd, int rank, int n) {
    const Desc& d = rd.desc[rank];
    size_t b = d.count * esize(d.type);
    std::vector<const void*> in(n);
    for (int r = 0; r < n; ++r) in[r] = rd.desc[r].send;
    std::vector<char> out;
    switch (d.kind) {
        case ALL_REDUCE:
            out.resize(b);
            reduce_typed(d.type, out.data(), in, 0, d.count, d.op);
            break;
        case REDUCE:
            if (rank != d.root) break;
            out.resize(b);
            reduce_typed(d.type, out.data(), in, 0, d.count, d.op);
            break;
        case REDUCE_SCATTER:
            out.resize(b);
            reduce_typed(d.type, out.data(), in, (size_t)rank * d.count, d.count, d.op);
            break;
        case BROADCAST:
            out.assign((const char*)in[d.root], (const char*)in[d.root] + b);
            break;
        case ALL_GATHER:
            out.resize(b * (size_t)n);
            for (int r = 0; r < n; ++r) memcpy(out.data() + (size_t)r * b, in[r], b);
            break;
    }
    return out;
}
