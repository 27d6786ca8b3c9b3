/* The parts of the byte walkers that look at many bytes for few tokens, done 32 or 64
 * bytes at a time with AVX2 where the CPU has it (chosen at run time: the wheel runs on
 * every x86-64, so nothing here is compiled for AVX2 outside these functions), and stubs
 * elsewhere that tell the caller to take its scalar path: linetree's link walk (a key's
 * end, a nested value), and jsonlex's read_string (a string's plain bytes), which the
 * classifier in lineindex uses.
 *
 * Each function gives exactly what the scalar code gives on the same bytes, on any bytes
 * (not only JSON): tests/native/test_linetree.py and test_lineindex.py hold the two equal
 * with the SIMD path on and forced off. Nothing reads past p[n-1]: a vector load is made
 * only where 32 (or 64) bytes remain, and the caller's scalar code walks the tail.
 */
#ifndef BOUNDCTX_LINEWALK_SIMD_H
#define BOUNDCTX_LINEWALK_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* What a SIMD walk returns besides an index (>= 0) and the lexer's RAN_OUT (-1): stopped
 * with fewer than a vector's bytes left (or, from a stub, before starting); the caller
 * goes on in scalar code from the state given back. */
#define BX_MORE (-9)

/* The string skip of jsonlex.skip_string_unchecked, in C for the container walk below: the
 * index after the closing quote of the string whose body starts at p[i], or -1. A quote
 * ends it unless an odd run of backslashes comes before it (counted from i on). */
static Py_ssize_t bx_string_end(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    while (i < n) {
        const unsigned char *q = (const unsigned char *)memchr(p + i, 34, (size_t)(n - i));
        Py_ssize_t j, k;
        if (q == NULL)
            return -1;
        j = q - p;
        k = j - 1;
        while (k >= i && p[k] == 92)
            k--;
        if ((j - 1 - k) % 2 == 0)
            return j + 1;
        i = j + 1;
    }
    return -1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define BX_SIMD_BUILT 1
#define BX_AVX2 __attribute__((target("avx2,popcnt")))

static int bx_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
}

/* One bit per byte of p[0:32] equal to c. */
BX_AVX2 static inline uint32_t bx_eq32(__m256i v, char c)
{
    return (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(c)));
}

/* One bit per byte of p[0:32] that is a control character (<= 31: max(byte, 31) == 31). */
BX_AVX2 static inline uint32_t bx_le31_32(__m256i v)
{
    return (uint32_t)_mm256_movemask_epi8(
        _mm256_cmpeq_epi8(_mm256_max_epu8(v, _mm256_set1_epi8(31)), _mm256_set1_epi8(31)));
}

/* The first byte of p[i:i+32] that ends a key's plain run (a quote, a backslash or a
 * control character, as _key_slot's byte loop stops at), as its offset from i; 32 when
 * none does. The caller made sure i + 32 <= n. */
BX_AVX2 static Py_ssize_t bx_key_stop32(const unsigned char *p, Py_ssize_t i)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
    uint32_t m = bx_eq32(v, 34) | bx_eq32(v, 92) | bx_le31_32(v);
    return m ? (Py_ssize_t)__builtin_ctz(m) : 32;
}

/* Four bitmasks of p[j:j+64]: quotes, backslashes, opening and closing brackets. */
typedef struct { uint64_t q, b, o, c; } bx_masks;

BX_AVX2 static inline bx_masks bx_classify64(const unsigned char *p)
{
    bx_masks m;
    __m256i lo = _mm256_loadu_si256((const __m256i *)p);
    __m256i hi = _mm256_loadu_si256((const __m256i *)(p + 32));
    /* '[' (0x5B) and '{' (0x7B) differ only in bit 5, as do ']' and '}': setting it folds
     * each pair into one compare, and no other byte folds onto 0x7B or 0x7D. */
    __m256i bit5 = _mm256_set1_epi8(0x20);
    __m256i flo = _mm256_or_si256(lo, bit5), fhi = _mm256_or_si256(hi, bit5);
    m.q = (uint64_t)bx_eq32(lo, 34) | ((uint64_t)bx_eq32(hi, 34) << 32);
    m.b = (uint64_t)bx_eq32(lo, 92) | ((uint64_t)bx_eq32(hi, 92) << 32);
    m.o = (uint64_t)bx_eq32(flo, 0x7B) | ((uint64_t)bx_eq32(fhi, 0x7B) << 32);
    m.c = (uint64_t)bx_eq32(flo, 0x7D) | ((uint64_t)bx_eq32(fhi, 0x7D) << 32);
    return m;
}

/* Skip the container whose opening bracket is p[i], as jsonlex.skip_value(checked=False)
 * does: brackets counted by depth (kinds not matched) outside strings, strings ended by
 * the first quote after an even run of backslashes. Works 64 bytes at a time while 64
 * remain. A block without backslashes is taken whole (strings from a prefix xor of its
 * quotes); in one with backslashes, the brackets between two strings are counted by
 * popcount unless the depth could reach zero among them, and a string that ends in the
 * same 64 bytes is found by its quote's bit. Either way a string that runs past the
 * block (a tool's output) is ended by memchr.
 *
 * Returns the index after the closing bracket, -1 (the bytes ran out inside a string), or
 * BX_MORE with *at the index (outside any string) and *depth the open containers from
 * which the caller's scalar loop goes on: fewer than 64 bytes were left there. */
BX_AVX2 static Py_ssize_t bx_skip_container64(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                                              Py_ssize_t *at, Py_ssize_t *depth)
{
    Py_ssize_t j = i, d = 0;
    /* Invariant: p[i:j] is walked, j is outside any string, d containers are open. */
    while (j + 64 <= n) {
        bx_masks m = bx_classify64(p + j);
        int pos = 0;  /* bits below pos of this block are walked */
        if (m.b == 0) {
            /* No backslash: no quote here is escaped, and the block starts outside any
             * string, so the bytes inside strings are those after an odd number of
             * quotes (a prefix xor of the quote bits). The brackets outside them are
             * counted at once unless the depth could reach zero among them. */
            uint64_t s = m.q, o, c;
            s ^= s << 1; s ^= s << 2; s ^= s << 4; s ^= s << 8; s ^= s << 16; s ^= s << 32;
            o = m.o & ~s;
            c = m.c & ~s;
            if (c == 0 || d > (Py_ssize_t)__builtin_popcountll(c)) {
                /* No close, or fewer than d: the depth stays above zero (the scalar
                 * walk ends only where a close brings it to zero). */
                d += (Py_ssize_t)__builtin_popcountll(o) - (Py_ssize_t)__builtin_popcountll(c);
                if (s >> 63) {
                    /* A string opened at the block's last quote runs on past it. */
                    Py_ssize_t r = bx_string_end(p, n, j + (63 - __builtin_clzll(m.q)) + 1);
                    if (r < 0)
                        return r;
                    j = r;
                } else {
                    j += 64;
                }
                continue;
            }
            /* Else the brackets one by one, below. */
        }
        for (;;) {
            uint64_t live = ~0ULL << pos, q = m.q & live, range, o, c;
            int qbit = q ? __builtin_ctzll(q) : 64, t;
            range = qbit == 64 ? live : live & ((1ULL << qbit) - 1);
            o = m.o & range;
            c = m.c & range;
            if (c != 0 && d <= (Py_ssize_t)__builtin_popcountll(c)) {
                /* The depth may reach zero here: take these brackets one by one. */
                uint64_t oc = o | c;
                while (oc) {
                    int b = __builtin_ctzll(oc);
                    oc &= oc - 1;
                    if ((m.o >> b) & 1) {
                        d++;
                    } else if (--d == 0) {
                        return j + b + 1;
                    }
                }
            } else {
                /* d > closes: it stays above zero throughout. */
                d += (Py_ssize_t)__builtin_popcountll(o) - (Py_ssize_t)__builtin_popcountll(c);
            }
            if (qbit == 64) {
                pos = 64;
                break;
            }
            /* A string opens at qbit: its end is the next quote not escaped. The run of
             * backslashes before a quote stops at the opening quote at the latest. */
            q = m.q & ~((2ULL << qbit) - 1);  /* quotes after qbit (none when qbit == 63) */
            t = -1;
            while (q) {
                int cand = __builtin_ctzll(q), k = cand - 1;
                q &= q - 1;
                while ((m.b >> k) & 1)
                    k--;  /* stops at qbit at the latest: a quote */
                if ((cand - 1 - k) % 2 == 0) {
                    t = cand;
                    break;
                }
            }
            if (t < 0) {
                /* Not closed in this block: memchr finds the end, and the walk goes on
                 * from just after it with a fresh block. */
                Py_ssize_t r = bx_string_end(p, n, j + qbit + 1);
                if (r < 0)
                    return r;
                j = r;
                pos = -1;
                break;
            }
            if (t == 63) {
                pos = 64;
                break;
            }
            pos = t + 1;
        }
        if (pos == 64)
            j += 64;
    }
    *at = j;
    *depth = d;
    return BX_MORE;
}

/* Whether bx_plain_run takes its AVX2 path in this module: off until the module turns it
 * on (bx_use_plain_simd), so tests can hold both paths to the same answers. */
static int bx_plain_simd = 0;

static int bx_use_plain_simd(int on)
{
    int before = bx_plain_simd;
    bx_plain_simd = on && bx_cpu_has_avx2();
    return before;
}

/* The index of the first byte at or after i that is a quote, a backslash or a control
 * character, where 32 bytes from it lie in p[0:n]; else the first index from which fewer
 * than 32 are left (the caller's byte loop goes on from there). Only skips bytes a JSON
 * string's byte loop takes as themselves, so the loop's answer is the same either way. */
BX_AVX2 static Py_ssize_t bx_plain_run_avx2(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    while (i + 32 <= n) {
        Py_ssize_t j = bx_key_stop32(p, i);  /* the same stops as a key's: inlined here */
        if (j < 32)
            return i + j;
        i += 32;
    }
    return i;
}

static inline Py_ssize_t bx_plain_run(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    return bx_plain_simd ? bx_plain_run_avx2(p, n, i) : i;
}

#else  /* no AVX2 to dispatch to: every call says "go scalar" */

#define BX_SIMD_BUILT 0

static int bx_cpu_has_avx2(void) { return 0; }
static Py_ssize_t bx_key_stop32(const unsigned char *p, Py_ssize_t i) { (void)p; (void)i; return -1; }
static Py_ssize_t bx_skip_container64(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                                      Py_ssize_t *at, Py_ssize_t *depth)
{
    (void)p; (void)n;
    *at = i;
    *depth = 0;
    return BX_MORE;
}
static int bx_use_plain_simd(int on) { (void)on; return 0; }
static inline Py_ssize_t bx_plain_run(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    (void)p; (void)n;
    return i;
}

#endif

#endif
