#include "timing.cuh"
#include <vector>
#include <random>
#include <cstring>
#include "configs.inc"

int main(int argc, char** argv) {
  uint32_t m = 8192, n = 8192, k = 8192; int iters = argc > 1 ? atoi(argv[1]) : 20;
  std::mt19937 rng(1);
  auto fill = [&](std::vector<uint8_t>& v) { for (auto& x : v) { uint8_t b = rng() & 0x3F; x = b | ((rng() & 1) << 7); } };
  // A as packed rows: k e4m3 bytes then the row's scales (fp32), pitch fp8_row_pitch(k, block) covers all modes
  const uint64_t lda = tilelink::fp8_row_pitch(k, tilelink::Fp8Scaling::kBlock);
  std::vector<uint8_t> a(size_t(m) * lda), b(size_t(n) * k);
  fill(a); fill(b);
  for (uint32_t r = 0; r < m; ++r) { float* t = reinterpret_cast<float*>(a.data() + size_t(r) * lda + k); for (uint32_t j = 0; j < (lda - k) / 4; ++j) t[j] = 0.01f; }
  std::vector<float> bs(size_t(n) * k / 128 + 16, 0.01f);
  void *da, *db, *dd; float *dbs, *das;
  cudaMalloc(&da, a.size()); cudaMalloc(&db, b.size()); cudaMalloc(&dd, size_t(m) * n * 2); cudaMalloc(&dbs, bs.size() * 4); cudaMalloc(&das, 16);
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice); cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dbs, bs.data(), bs.size() * 4, cudaMemcpyHostToDevice); cudaMemcpy(das, bs.data(), 16, cudaMemcpyHostToDevice);
  std::vector<uint16_t> ref(size_t(m) * n), got(size_t(m) * n);
  const char* last = "";
  auto run = [&](const char* mode, double (*f)(const ExpProblem&), const char* nm) {
    ExpProblem p{m, n, k, da, strcmp(mode, "kTensor") == 0 ? (uint64_t)k : lda, das, db, dbs, dd, iters};
    if (strcmp(mode, "kRow") == 0) p.lda = tilelink::fp8_row_pitch(k, tilelink::Fp8Scaling::kRow);
    cudaMemset(dd, 0xFF, size_t(m) * n * 2);
    f(p); cudaDeviceSynchronize();
    cudaMemcpy(got.data(), dd, got.size() * 2, cudaMemcpyDeviceToHost);
    if (strcmp(last, mode) != 0) { ref = got; last = mode; printf("   (reference of %s)\n", mode); return; }
    size_t diff = 0; for (size_t i = 0; i < got.size(); ++i) diff += got[i] != ref[i];
    printf("   %zu of %zu elements differ from the first %s configuration's\n", diff, got.size(), mode);
  };
#include "runs.inc"
  return 0;
}
