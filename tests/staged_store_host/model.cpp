// Host model of staged_store.cuh's store_fragment_staged (tests/test_staged_store_host.py builds and runs
// it): the header itself, compiled for the host against gemm_ladder/ptx/common.cuh here, one consumer
// warpgroup's 4 warps as 4 x 32 std::threads (each warp's __syncwarp a barrier of its 32). For every case
// (BN, output element size, the output's pitch, its base's offset from 16 bytes, the tile's rows and
// columns left before the M and N edges) it checks, byte for byte: each output element of the tile inside
// the edges holds pair_op's value for it; every other byte of the buffer (the rows and columns outside the
// edges, the pitch padding, the bytes before the base and before the tile's first column) keeps its guard
// value; pair_op ran exactly once per pair; every global store is aligned to its size (16-byte windows,
// 2- or 4-byte elements); and element stores happen only at a row's two ends (at most 2 x 7 per row).
// Prints "ok <cases>" and exits 0, or the first failure and exits 1.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "gemm_ladder/staged_store.cuh"

thread_local Dim3 threadIdx;
alignas(1024) uint8_t g_smem[4 * gl::kStagedWarpBytes];

struct WarpBarrier {
  std::mutex m;
  std::condition_variable cv;
  int count = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    const int g = generation;
    if (++count == 32) {
      count = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != g; });
    }
  }
};
WarpBarrier g_bars[4];
void __syncwarp() { g_bars[threadIdx.x / 32 % 4].wait(); }

std::atomic<long> g_vec{0}, g_elem{0};
void gl::count_store(int bytes) { (bytes == 16 ? g_vec : g_elem)++; }

static float value(int r, int c) { return static_cast<float>((r * 7 + c * 13) % 241 - 120); }  // exact in bf16

static uint16_t bf16(float x) { return gl::bf16_bits(x); }

template <int BN, typename OutT, bool kTight>
static bool run_case(int rows, int cols, long long ldc, int off, int row0, int col0, char* why, size_t why_n) {
  constexpr int E = sizeof(OutT);
  const long long elems = off + (row0 + 64 + 2) * ldc + BN + 64;
  std::vector<uint8_t> raw(elems * E + 64);
  uint8_t* base = raw.data() + (16 - reinterpret_cast<uintptr_t>(raw.data()) % 16) % 16;
  const size_t bytes = (elems * E);
  std::memset(base, 0xAB, bytes);
  std::memset(g_smem, 0xCD, sizeof g_smem);
  OutT* C = reinterpret_cast<OutT*>(base + off * E);
  std::vector<std::atomic<int>> calls(64 * BN);
  for (auto& x : calls) x = 0;
  std::atomic<bool> bad_op{false};
  g_vec = 0;
  g_elem = 0;
  std::atomic<bool> threw{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 128; ++t) {
    threads.emplace_back([&, t] {
      threadIdx.x = 128 + t;  // consumer warpgroup 1
      const int warp = t / 32, lane = t % 32, q = lane % 4;
      float d[BN / 2];
      for (int j = 0; j < BN / 8; ++j)
        for (int i = 0; i < 2; ++i)
          for (int c = 0; c < 2; ++c)
            d[4 * j + 2 * i + c] = value(row0 + 16 * warp + lane / 4 + 8 * i, col0 + 8 * j + 2 * q + c);
      try {
        gl::store_fragment_staged<BN, kTight>(C, ldc, d, row0, col0, rows, cols, g_smem + warp * gl::kStagedWarpBytes,
                                      [&](float& x0, float& x1, int r, int c) {
                                        const int lr = r - row0, lc = c - col0;
                                        if (lr < 0 || lr >= 64 || lc < 0 || lc >= BN || lc % 2 || x0 != value(r, c) ||
                                            x1 != value(r, c + 1))
                                          bad_op = true;
                                        else
                                          calls[lr * BN + lc]++;
                                        x0 = 2 * x0;
                                        x1 = 2 * x1 + 1;
                                      });
      } catch (const char*) {
        threw = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  if (threw) return snprintf(why, why_n, "a misaligned store or shared load"), false;
  if (bad_op) return snprintf(why, why_n, "pair_op called with a wrong place or value"), false;
  for (int lr = 0; lr < 64; ++lr)
    for (int lc = 0; lc < BN; lc += 2)
      if (calls[lr * BN + lc] != 1)
        return snprintf(why, why_n, "pair_op ran %d times on (%d, %d)", calls[lr * BN + lc].load(), lr, lc), false;
  long rows_in = 0;
  for (size_t b = 0; b < bytes; ++b) {
    const long long rel = static_cast<long long>(b) - off * E;  // byte offset from C
    bool inside = false;
    uint8_t want = 0xAB;
    if (rel >= 0) {
      const long long el = rel / E, r = el / ldc, c = el % ldc;
      if (r >= row0 && r < row0 + 64 && r < rows && c >= col0 && c < col0 + BN && c < cols) {
        inside = true;
        const float v = (c % 2 == 0) ? 2 * value(r, c) : 2 * value(r, c) + 1;
        uint8_t tmp[4];
        if (E == 2) {
          const uint16_t h = bf16(v);
          std::memcpy(tmp, &h, 2);
        } else {
          std::memcpy(tmp, &v, 4);
        }
        want = tmp[rel % E];
      }
    }
    if (base[b] != want)
      return snprintf(why, why_n, "byte %zu (%s): %#x, want %#x", b, inside ? "in the output" : "outside it", base[b],
                      want), false;
  }
  for (int r = row0; r < row0 + 64 && r < rows; ++r) ++rows_in;
  if (g_elem > rows_in * 2 * (16 / E - 1))
    return snprintf(why, why_n, "%ld element stores for %ld rows: more than the rows' two ends", g_elem.load(), rows_in),
           false;
  const long long row_bytes = static_cast<long long>(std::min(BN, cols - col0)) * E;
  if (g_vec < rows_in * (row_bytes / 16 - 1))
    return snprintf(why, why_n, "%ld 16-byte stores for %ld rows of %lld bytes", g_vec.load(), rows_in, row_bytes), false;
  return true;
}

template <int BN, typename OutT, bool kTight>
static int sweep(const char* name) {
  constexpr int E = sizeof(OutT);
  const int row0 = 64, col0 = BN;  // a tile with rows above it and columns left of it: neither may be written
  int cases = 0;
  char why[256];
  for (int ncols : {1, 7, 8, 9, 63, 65, BN - 1, BN, BN + 37})
    for (int extra : {0, 1, 5, 16 / E})
      for (int off : {0, 1, 3, 6})
        for (int rows_left : {1, 17, 64}) {
          const int cols = col0 + ncols, rows = row0 + rows_left;
          const long long ldc = cols + extra;
          ++cases;
          if (!run_case<BN, OutT, kTight>(rows, cols, ldc, off, row0, col0, why, sizeof why)) {
            printf("FAIL %s%s BN %d: N = %d (tile columns %d), ldc %lld, base +%d elements, M = %d: %s\n", name,
                   kTight ? " (kTight)" : "", BN, cols,
                   ncols, ldc, off, rows, why);
            exit(1);
          }
        }
  return cases;
}

int main() {
  int cases = 0;
  cases += sweep<64, gl::elem_t, false>("bf16");
  cases += sweep<128, gl::elem_t, false>("bf16");
  cases += sweep<256, gl::elem_t, false>("bf16");
  cases += sweep<64, float, false>("fp32");
  cases += sweep<128, float, false>("fp32");
  cases += sweep<256, float, false>("fp32");
  // kTight (the fused-epilogue builds' form: at most 8 rows per chunk, later chunks' places laundered)
  cases += sweep<64, gl::elem_t, true>("bf16");
  cases += sweep<128, gl::elem_t, true>("bf16");
  cases += sweep<128, float, true>("fp32");
  cases += sweep<64, float, true>("fp32");
  printf("ok %d\n", cases);
  return 0;
}
