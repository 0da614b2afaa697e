// CPU emulation of the CUDA C that needle generates: include this, then the .cu text,
// and compile as C++20.  Every CUDA thread of a block is a ucontext fiber; the block's
// fibers run on the calling OS thread, one at a time, switching only at __syncthreads()
// and warp shuffles, so:
//   - a missing barrier shows as a wrong result (fibers run ahead of their writers or
//     readers; blocks cycle through four scheduling orders, see `pick`),
//   - a barrier not reached by every thread of the block is reported as a deadlock,
//   - warp shuffles exchange values through a per-block slot array with warp barriers.
// threadIdx & co are globals the scheduler sets before resuming each fiber; __shared__
// becomes `static` (one block runs at a time); locals live on each fiber's own stack.
// A fiber is started with makecontext/setcontext and then switched with _setjmp /
// _longjmp, which (unlike swapcontext) do not make a signal-mask system call.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>
#include <setjmp.h>
#include <ucontext.h>

struct nd_dim3 { unsigned x = 1, y = 1, z = 1; };

namespace nd_emu {
inline thread_local nd_dim3 thread_idx, block_idx, block_dim, grid_dim;

struct Fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool started = false;
  std::vector<char> stack;
  unsigned tid = 0;
  bool done = false;
  const unsigned long* wait_on = nullptr;  // the generation counter it waits to change
  unsigned long wait_value = 0;
  bool runnable() const { return !done && (wait_on == nullptr || *wait_on != wait_value); }
};

struct State {
  jmp_buf scheduler;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  unsigned n_threads = 0;
  unsigned arrived = 0;
  unsigned long generation = 0;
  unsigned warp_arrived[32] = {};
  unsigned long warp_generation[32] = {};
  uint64_t slots[1024] = {};
};
inline thread_local State st;

inline void yield() {
  if (!_setjmp(st.current->jb)) _longjmp(st.scheduler, 1);
}

inline void wait_for(unsigned& arrived, unsigned long& generation, unsigned count) {
  if (++arrived == count) {
    arrived = 0;
    ++generation;
    return;
  }
  st.current->wait_on = &generation;
  st.current->wait_value = generation;
  yield();
  st.current->wait_on = nullptr;
}

inline void syncthreads() { wait_for(st.arrived, st.generation, st.n_threads); }

inline void syncwarp() {
  const unsigned w = st.current->tid / 32;
  wait_for(st.warp_arrived[w], st.warp_generation[w], std::min(32u, st.n_threads - 32 * w));
}

template <class T> T shfl_xor(T v, int mask) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  const unsigned tid = st.current->tid;
  std::memcpy(&st.slots[tid], &v, sizeof(T));
  syncwarp();
  const unsigned src = (tid & ~31u) | ((tid & 31u) ^ (unsigned)mask);
  T out;
  std::memcpy(&out, &st.slots[src < st.n_threads ? src : tid], sizeof(T));
  syncwarp();
  return out;
}

inline void entry() {
  (*st.body)();
  st.current->done = true;
  _longjmp(st.scheduler, 1);
}

// Runs fiber `f` until it waits at a barrier or finishes.
__attribute__((noinline)) inline void resume(Fiber& f) {
  if (!_setjmp(st.scheduler)) {
    if (!f.started) {
      f.started = true;
      setcontext(&f.ctx);
    }
    _longjmp(f.jb, 1);
  }
}

// Scheduling policies (block b uses policy (b + first_policy) % 4), so that both
// directions of a race show up:
//   0 round-robin from thread 0 up   1 round-robin from the last thread down
//   2 always the lowest runnable thread (a warp runs ahead through its shuffles and
//     up to the next __syncthreads before the others move)   3 the highest one
inline int pick(const std::vector<Fiber>& fibers, unsigned n, unsigned policy, unsigned last) {
  const bool down = policy & 1, restart = policy & 2;
  for (unsigned k = 0; k < n; ++k) {
    unsigned step = restart ? k : (k + 1 + (down ? n - 1 - last : last)) % n;
    unsigned i = down ? n - 1 - step : step;
    if (fibers[i].runnable()) return (int)i;
  }
  return -1;
}

// Runs `body` as a grid of `grid` blocks of `block` threads.  0: ok, 1: deadlock
// (a barrier that not every thread of a block reached), 2: bad launch shape.
inline int launch(const std::function<void()>& body, unsigned grid, unsigned block, int first_policy) {
  if (block == 0 || block > 1024) return 2;
  static thread_local std::vector<Fiber> pool;
  if (pool.size() < block) pool.resize(block);
  st.body = &body;
  st.n_threads = block;
  grid_dim = {grid, 1, 1};
  block_dim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    block_idx = {b, 1, 1};
    st.arrived = 0;
    st.generation = 0;
    std::fill(std::begin(st.warp_arrived), std::end(st.warp_arrived), 0u);
    for (unsigned t = 0; t < block; ++t) {
      Fiber& f = pool[t];
      if (f.stack.empty()) f.stack.resize(1 << 16);
      f.tid = t;
      f.done = false;
      f.started = false;
      f.wait_on = nullptr;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, entry, 0);
    }
    const unsigned policy = (b + (unsigned)first_policy) % 4;
    unsigned finished = 0, last = (policy & 1) ? 0 : block - 1;
    while (finished < block) {
      const int i = pick(pool, block, policy, last);
      if (i < 0) return 1;
      last = (unsigned)i;
      st.current = &pool[i];
      thread_idx = {pool[i].tid, 1, 1};
      resume(pool[i]);
      if (pool[i].done) ++finished;
    }
  }
  return 0;
}
}  // namespace nd_emu

#define threadIdx nd_emu::thread_idx
#define blockIdx nd_emu::block_idx
#define blockDim nd_emu::block_dim
#define gridDim nd_emu::grid_dim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __syncthreads() nd_emu::syncthreads()
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask) { return nd_emu::shfl_xor(v, mask); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
// a product rounded on its own (no fma contraction), as CUDA's intrinsics round it
inline float __fmul_rn(float a, float b) { volatile float p = a * b; return p; }
inline double __dmul_rn(double a, double b) { volatile double p = a * b; return p; }
#include <math.h>  // expf, logf, tanhf, sqrtf, powf, fabsf, fmaxf, fminf in the global namespace
