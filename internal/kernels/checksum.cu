// CUDA kernels of kvaudit's GPU engine (package kernels; docs/spec.md §1).
//
// kvaudit_checksum_* is kernels.(*Kernel).Thread (model.go) plus the block
// reduction of kernels.(*Kernel).Exec, statement by statement: the tags in
// brackets ([decompose], [lane], [tokens], [address], [accumulate],
// [weigh], [reduce]) mark the same steps in both. Change both together:
// the model's tests, bit for bit against the reference engine, are this
// kernel's proof on machines without a GPU.
//
// All arithmetic is on 64-bit integers; sums wrap modulo 2^64, which is
// the definition, so the order of additions (and of the atomic adds of
// thread blocks) does not matter. Every kernel parameter is 64 bits wide:
// gorgonia.org/cu's Launch copies 8 bytes per parameter.
//
// Regenerate checksum.ptx with `go generate ./kernels/` (gen_ptx.sh).

typedef unsigned long long u64;
typedef long long i64;

#define UNROLL 4    // kernels.Unroll
#define ROW_WORDS 4 // kernels.RowWords
#define WARP 32     // kernels.Warp
#define MAX_THREADS 512 // kernels.MaxTileLanes: W*TL <= 512, a multiple of WARP

// Load variants: the kernel is compiled once for each, so that each loop
// holds only its own loads (kernels.(*Kernel).Entry names them).
#define LOAD_PAIR 0   // w = 8, V = 2: one 16-byte load
#define LOAD_U64 1    // w = 8, V = 1
#define LOAD_U32 2    // w = 4
#define LOAD_U16 3    // w = 2
#define LOAD_GATHER 4 // byte by byte through the byte offset table

// load reads piece p (and, for a pair, p+1) of the cell whose piece p lies
// at `at` (wide loads), or whose address is `at` (gather: byte by byte
// through the byte offset table). Mirrors kernels.(*Kernel).load.
template <int LOAD>
__device__ __forceinline__ void load(const unsigned char *__restrict__ data,
                                     const i64 *__restrict__ offsets, i64 at, i64 p,
                                     i64 width, u64 *x, u64 *y)
{
    *y = 0;
    if (LOAD == LOAD_GATHER) {
        u64 v = 0;
        for (i64 i = 0; i < width; i++) {
            v |= (u64)__ldg(data + at + offsets[p * width + i]) << (8 * i);
        }
        *x = v;
    } else if (LOAD == LOAD_U16) {
        *x = __ldg((const unsigned short *)(data + at));
    } else if (LOAD == LOAD_U32) {
        *x = __ldg((const unsigned int *)(data + at));
    } else if (LOAD == LOAD_PAIR) {
        const ulonglong2 v = __ldg((const ulonglong2 *)(data + at));
        *x = v.x;
        *y = v.y;
    } else {
        *x = __ldg((const u64 *)(data + at));
    }
}

// blockSum returns the sum of v over the thread block, in thread 0.
__device__ __forceinline__ u64 blockSum(u64 v)
{
    __shared__ u64 warpSums[WARP];
    const unsigned lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int o = WARP / 2; o > 0; o /= 2) {
        v += __shfl_down_sync(0xffffffffu, v, o);
    }
    if (lane == 0) {
        warpSums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + WARP - 1) / WARP ? warpSums[lane] : 0;
        for (int o = WARP / 2; o > 0; o /= 2) {
            v += __shfl_down_sync(0xffffffffu, v, o);
        }
    }
    return v;
}

// checksum adds, for every row of the row table (ROW_WORDS words:
// byte offset of the block's first kernel row in data, request position of
// its first token, valid tokens, output slot), the cache's part of the
// block checksum to out[slot]: sum over heads h and valid tokens t and
// pieces p of factors[h] * x * (2*((first+t)*pieces + p) + 1).
// Parameters after offsets are kernels.Kernel, in its field order. One
// entry point per load variant: kvaudit_checksum_pair, _u64, _u32, _u16
// and _gather.
template <int LOAD>
__device__ __forceinline__ void checksum(
    const unsigned char *__restrict__ data, const i64 *__restrict__ rows, u64 nrows,
    u64 *__restrict__ out, const u64 *__restrict__ factors, const i64 *__restrict__ offsets,
    i64 rowStride, i64 tokenStride, i64 headStride, i64 kernelTokens, i64 blockTokens,
    i64 pieces, i64 width, i64 vec, i64 lanes, i64 tileLanes, i64 tokenLanes,
    i64 chunkTokens, i64 chunks, i64 tiles, i64 threads, i64 gather)
{
    const i64 bid = (i64)blockIdx.x;
    const i64 tid = (i64)threadIdx.x;
    (void)nrows;
    (void)blockTokens;
    (void)threads;
    (void)vec;
    (void)gather;
    u64 contribution = 0;

    // [decompose] block -> row, chunk, tile.
    const i64 tile = bid % tiles;
    const i64 rest = bid / tiles;
    const i64 chunk = rest % chunks;
    const i64 row = rest / chunks;
    const i64 rowBase = rows[row * ROW_WORDS + 0];
    const i64 first = rows[row * ROW_WORDS + 1];
    const i64 valid = rows[row * ROW_WORDS + 2];
    const i64 slot = rows[row * ROW_WORDS + 3];

    // [lane] thread -> token lane, lane -> head, piece.
    const i64 tokenLane = tid / tileLanes;
    const i64 lane = tile * tileLanes + tid % tileLanes;
    if (tokenLane < tokenLanes && lane < lanes) {
        const i64 perCell = pieces / vec;
        const i64 h = lane / perCell;
        const i64 p = (lane % perCell) * vec;

        // [tokens] t0, t0+TL, ... below the chunk's end and the valid tokens.
        const i64 t0 = chunk * chunkTokens + tokenLane;
        const i64 end = min(chunk * chunkTokens + chunkTokens, valid);
        if (t0 < end) {
            const i64 n = (end - t0 + tokenLanes - 1) / tokenLanes;
            const i64 steps = (n + UNROLL - 1) / UNROLL * UNROLL;

            // [address] the cell of token t0, and how it moves by TL tokens.
            i64 tk = t0 % kernelTokens;
            i64 at = rowBase + (t0 / kernelTokens) * rowStride + tk * tokenStride + h * headStride;
            if (LOAD != LOAD_GATHER) {
                at += offsets[p];
            }
            const i64 stepTK = tokenLanes % kernelTokens;
            const i64 stepAddr = (tokenLanes / kernelTokens) * rowStride + stepTK * tokenStride;
            const i64 wrapAddr = rowStride - kernelTokens * tokenStride;

            // [accumulate] a = sum of y_i, b = sum over steps of a, e = sum
            // of the second pieces of pairs.
            u64 a = 0, b = 0, e = 0;
            for (i64 i = 0; i < steps; i += UNROLL) {
                u64 x[UNROLL], y[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; u++) {
                    x[u] = 0;
                    y[u] = 0;
                    if (i + u < n) {
                        load<LOAD>(data, offsets, at, p, width, &x[u], &y[u]);
                        tk += stepTK;
                        at += stepAddr;
                        if (tk >= kernelTokens) {
                            tk -= kernelTokens;
                            at += wrapAddr;
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < UNROLL; u++) {
                    a += x[u] + y[u];
                    b += a;
                    e += y[u];
                }
            }

            // [weigh] j = (first+t0)*P + p + i*TL*P for the i-th token.
            const u64 j0 = (u64)(first + t0) * (u64)pieces + (u64)p;
            const u64 s = (2 * j0 + 1) * a + 2 * (u64)pieces * (u64)tokenLanes * ((u64)steps * a - b) + 2 * e;
            contribution = factors[h] * s;
        }
    }

    // [reduce] one atomic add per thread block.
    const u64 sum = blockSum(contribution);
    if (tid == 0 && sum != 0) {
        atomicAdd(out + slot, sum);
    }
}

#define ENTRY(name, LOAD)                                                               \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS, 2) name(                  \
        const unsigned char *__restrict__ data, const i64 *__restrict__ rows, u64 nrows, \
        u64 *__restrict__ out, const u64 *__restrict__ factors,                          \
        const i64 *__restrict__ offsets, i64 rowStride, i64 tokenStride,                 \
        i64 headStride, i64 kernelTokens, i64 blockTokens, i64 pieces, i64 width,        \
        i64 vec, i64 lanes, i64 tileLanes, i64 tokenLanes, i64 chunkTokens,              \
        i64 chunks, i64 tiles, i64 threads, i64 gather)                                  \
    {                                                                                    \
        checksum<LOAD>(data, rows, nrows, out, factors, offsets, rowStride,              \
                       tokenStride, headStride, kernelTokens, blockTokens, pieces,       \
                       width, vec, lanes, tileLanes, tokenLanes, chunkTokens, chunks,    \
                       tiles, threads, gather);                                          \
    }

ENTRY(kvaudit_checksum_pair, LOAD_PAIR)
ENTRY(kvaudit_checksum_u64, LOAD_U64)
ENTRY(kvaudit_checksum_u32, LOAD_U32)
ENTRY(kvaudit_checksum_u16, LOAD_U16)
ENTRY(kvaudit_checksum_gather, LOAD_GATHER)

// splitmix64 is the fill pattern of kvaudit_fill.
__device__ __forceinline__ u64 splitmix64(u64 x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// kvaudit_fill writes splitmix64(seed + i) to word i of dst (the benchmark
// fills its cache with it).
extern "C" __global__ void kvaudit_fill(u64 *__restrict__ dst, u64 words, u64 seed)
{
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        dst[i] = splitmix64(seed + i);
    }
}

// kvaudit_read_sum adds every 8-byte word of src (pairs 16-byte pairs) to
// *out: a plain read of the same bytes, the benchmark's yardstick.
extern "C" __global__ void kvaudit_read_sum(const ulonglong2 *__restrict__ src, u64 pairs,
                                            u64 *__restrict__ out)
{
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 s = 0;
    for (; i + (UNROLL - 1) * stride < pairs; i += UNROLL * stride) {
        ulonglong2 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            v[u] = __ldg(src + i + u * stride);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            s += v[u].x + v[u].y;
        }
    }
    for (; i < pairs; i += stride) {
        const ulonglong2 v = __ldg(src + i);
        s += v.x + v.y;
    }
    const u64 sum = blockSum(s);
    if (threadIdx.x == 0) {
        atomicAdd(out, sum);
    }
}
