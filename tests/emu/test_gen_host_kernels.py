#!/usr/bin/env python3
"""Unit tests of gen_host_kernels.py's rewrites and refusals on small CUDA snippets (ctest
unit.test_gen_host_kernels). The kernels of kernels/ themselves are covered by the emulated
builds; these pin the patterns: launches, static shared memory, __launch_bounds__, intrinsics,
line preservation, the inline PTX it translates (mma, ldmatrix, cp.async), and the refusals
(atomics, <<<>>> without --whole, __shared__ outside a function, unknown asm)."""
import os
import re
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_host_kernels as gen  # noqa: E402

BANNER = '// ' + '=' * 20 + '\n// Launchers\n// ' + '=' * 20 + '\n'


def run(src, whole=True):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'k.cu')
        with open(path, 'w') as f:
            f.write(src)
        out, _ = gen.generate(path, d, whole)
    return out[out.index('#line 1'):].split('\n', 1)[1]  # the body after the header


class Rewrites(unittest.TestCase):
    def test_launches(self):
        body = run('__global__ void k(float* x, int n) {}\n'
                   'template <int A, bool B> __global__ void t(float* x) {}\n'
                   'void go(float* x, cudaStream_t s) {\n'
                   '  k<<<dim3(4, 2), dim3(32, 8), 0, s>>>(x, 3);\n'
                   '  t<4, true>\n'
                   '      <<<1, 64>>>(x);\n'
                   '  if (x) k<<<n_blocks(3), 128, 1024>>>(\n      x, 1);\n'
                   '}\n')
        self.assertIn('::cuda_emu::launch_kernel(k, dim3(4, 2), dim3(32, 8), 0, s, x, 3);', body)
        self.assertRegex(body, r'::cuda_emu::launch_kernel\(t<4, true>,\n 1, 64,0,cudaStream_t\(0\),'
                               r'\n? x\);')
        self.assertRegex(body, r'if \(x\) ::cuda_emu::launch_kernel\(k, n_blocks\(3\), 128, 1024,'
                               r'cudaStream_t\(0\),\s+x, 1\);')
        self.assertNotIn('<<<', body)

    def test_lines_are_kept(self):
        src = ('__global__ void __launch_bounds__(256)\n    k(float* x) {\n'
               '  __shared__ float a[8][33], b[4];\n'
               '  __shared__ __align__(16) int c;\n'
               '  x[0] = __expf(a[0][0]) + rsqrtf(b[0]) + __ldg(x) + float(c);\n}\n'
               'void go(float* x) {\n  k\n      <<<1,\n 256>>>\n      (x);\n  int after = 1;\n}\n')
        body = run(src)
        self.assertEqual(body.count('\n'), src.count('\n') + 1)
        self.assertEqual(body.split('\n').index('  int after = 1;'),
                         src.split('\n').index('  int after = 1;'))

    def test_static_shared(self):
        body = run('__global__ void k(float* x) {\n'
                   '  __shared__ float sh[8][33], sb[4];\n'
                   '  __shared__ __align__(16) double one;\n}\n')
        self.assertIn('float (&sh)[8][33] = ::cuda_emu::static_smem<float[8][33], alignof(float)>'
                      '(&cuda_emu_smem_tag_sh);', body)
        self.assertIn('float (&sb)[4] = ::cuda_emu::static_smem<float[4], alignof(float)>', body)
        self.assertIn('double& one = ::cuda_emu::static_smem<double, 16>(&cuda_emu_smem_tag_one);',
                      body)
        self.assertIn('static constexpr char cuda_emu_smem_tag_sh = 0;', body)

    def test_launch_bounds_and_qualifiers(self):
        body = run('__device__ __forceinline__ float f(float x) { return __fdividef(x, 2.f); }\n'
                   '__global__ void __launch_bounds__(4 * 64, 2) k(float* x) { x[0] = f(1); }\n'
                   '__global__ void __launch_bounds__(128) d(float* x);\n')
        self.assertIn('inline float f(float x) { return ::cuda_emu::fdividef(x, 2.f); }', body)
        self.assertIn('void  k(float* x) { ::cuda_emu::launch_bounds(4 * 64); x[0] = f(1); }', body)
        self.assertIn('void  d(float* x);', body)
        self.assertNotRegex(body, r'__(global|device|forceinline|launch_bounds)__')

    def test_intrinsics(self):
        body = run('__global__ void k(float* x) {\n'
                   '  x[0] = __expf(x[1]) + __logf(x[2]) + __powf(x[3], 2.f) + rsqrtf(x[4]) +\n'
                   '         ::cuda_emu::rsqrtf(1.f) + __ldg(&x[5]) + __saturatef(x[6]);\n}\n')
        self.assertIn('expf(x[1]) + logf(x[2]) + powf(x[3], 2.f) + ::cuda_emu::rsqrtf(x[4])', body)
        self.assertIn('::cuda_emu::rsqrtf(1.f) + ::cuda_emu::ldg(&x[5]) + ::cuda_emu::saturatef(',
                      body)

    def test_ldmatrix_and_cp_async(self):
        src = ('__device__ void f(uint32_t (&r)[4], uint32_t& x, uint32_t a, const void* g, int n) {\n'
               '  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n"\n'
               '               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));\n'
               '  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(x)'
               ' : "r"(a + 16));\n'
               '  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(a), "l"(g),'
               ' "r"(n) : "memory");\n'
               '  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(a), "l"(g), "n"(8));\n'
               '  asm volatile("cp.async.commit_group;\\n" ::: "memory");\n'
               '  asm volatile("cp.async.wait_group %0;\\n" ::"n"(1) : "memory");\n'
               '  asm volatile("cp.async.wait_group 0;");\n'
               '  asm volatile("cp.async.wait_all;");\n'
               '  x = uint32_t(__cvta_generic_to_shared(g));\n}\n'
               '__global__ void k(float* x) {}\n')
        body = run(src)
        self.assertIn('{ const auto cuda_emu_r = ::cuda_emu::ldmatrix_m8n8_b16<4, false>(a); '
                      'r[0] = cuda_emu_r[0]; r[1] = cuda_emu_r[1]; r[2] = cuda_emu_r[2]; '
                      'r[3] = cuda_emu_r[3]; }', body)
        self.assertIn('::cuda_emu::ldmatrix_m8n8_b16<1, true>(a + 16); x = cuda_emu_r[0]; }', body)
        self.assertIn('::cuda_emu::cp_async_cg(a, g, 16, n);', body)
        self.assertIn('::cuda_emu::cp_async_ca(a, g, 8);', body)
        self.assertIn('::cuda_emu::cp_async_commit_group();', body)
        self.assertIn('::cuda_emu::cp_async_wait_group(1);', body)
        self.assertIn('::cuda_emu::cp_async_wait_group(0);', body)
        self.assertIn('::cuda_emu::cp_async_wait_all();', body)
        self.assertIn('x = uint32_t(::cuda_emu::cvta_generic_to_shared(g));', body)
        self.assertNotIn('asm', body)
        self.assertEqual(body.count('\n'), src.count('\n') + 1)  # lines kept

    def test_default_mode_cuts_at_the_banner(self):
        body = run('__global__ void k(float* x) {}\n' + BANNER + 'void go(float* x) { k<<<1, 1>>>(x); }\n',
                   whole=False)
        self.assertNotIn('go(', body)


class Refusals(unittest.TestCase):
    def refused(self, src, pattern, whole=True):
        with self.assertRaises(gen.GenError) as cm:
            run(src, whole)
        self.assertRegex(str(cm.exception), pattern)
        self.assertRegex(str(cm.exception), r'k\.cu:\d+: error:')
        return str(cm.exception)

    def test_atomics(self):
        msg = self.refused('__global__ void k(float* x) {\n  atomicAdd(x, 1.f);\n}\n', r'atomics')
        self.assertIn('k.cu:2:', msg)
        self.refused('__global__ void k(int* x) { cuda::atomic_ref<int> r(*x); }\n', r'atomics')

    def test_launch_without_whole(self):
        self.refused('__global__ void k(float* x) {}\nvoid go(float* x) { k<<<1, 1>>>(x); }\n'
                     + BANNER, r'<<<.*--whole', whole=False)

    def test_shared_outside_a_function(self):
        self.refused('__shared__ float g[4];\n__global__ void k(float* x) {}\n',
                     r'outside a function')

    def test_unknown_asm_and_votes(self):
        self.refused('__global__ void k(int* x) { asm volatile("membar.gl;"); }\n', r'inline asm')
        self.refused('__global__ void k(int* x) { x[0] = __ballot_sync(~0u, 1); }\n',
                     r'__ballot_sync')

    def test_asm_forms_without_emulation(self):
        # ldmatrix of another shape, a wrong constraint, a missing destination register, a bulk
        # copy, a cp.async from a 32-bit source operand, two instructions in one asm statement.
        self.refused('__global__ void k(int* x, unsigned a) { asm volatile("ldmatrix.sync.aligned.'
                     'm16n16.x1.trans.shared.b8 {%0, %1}, [%2];" : "=r"(x[0]), "=r"(x[1]) : "r"(a)); }\n',
                     r'inline asm')
        self.refused('__global__ void k(int* x, unsigned a) { asm volatile("ldmatrix.sync.aligned.'
                     'm8n8.x1.shared.b16 {%0}, [%1];" : "=l"(x[0]) : "r"(a)); }\n', r'constraint "=l"')
        self.refused('__global__ void k(int* x, unsigned a) { asm volatile("ldmatrix.sync.aligned.'
                     'm8n8.x2.shared.b16 {%0}, [%1];" : "=r"(x[0]) : "r"(a)); }\n', r'should be 2')
        self.refused('__global__ void k(int* x, unsigned a) { asm volatile("cp.async.bulk.shared::'
                     'cluster.global [%0], [%1], 16;" :: "r"(a), "l"(x)); }\n', r'inline asm')
        self.refused('__global__ void k(int* x, unsigned a) { asm volatile("cp.async.cg.shared.'
                     'global [%0], [%1], 16;" :: "r"(a), "r"(a)); }\n', r'cp.async source')
        self.refused('__global__ void k(int* x) { asm volatile("cp.async.commit_group;\\n'
                     'cp.async.wait_group 0;"); }\n', r'inline asm')
        self.refused('__global__ void k(int* x) { x[0] = int(__cvta_generic_to_global(x)); }\n',
                     r'__cvta_generic_to_global')

    def test_bad_launch_configuration(self):
        self.refused('__global__ void k(float* x) {}\nvoid go(float* x) { k<<<1>>>(x); }\n',
                     r'2 to 4 parts')


if __name__ == '__main__':
    unittest.main()
