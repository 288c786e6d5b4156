#!/usr/bin/env python3
"""Turns a CUDA source into host C++ that runs on the CPU emulator (cuda_emu.h).

  gen_host_kernels.py --src kernels/flash_attention.cu --root <repo> --out flash_attention_host.inc
  gen_host_kernels.py --whole --src kernels/layernorm.cu --root <repo> --out layernorm_host.cpp

Two modes:
  default  the kernel part only (for a test that launches the kernels itself with
           cuda_emu::launch): the source is cut at its launcher banner (a `// ====` line, a
           `// Launchers` line, a `// ====` line); kernels, device helpers and host constants
           before it are kept and the namespaces open at the cut are closed. Writes a header.
  --whole  the whole file, launchers included (for an emulated build of the kernel library that
           the GPU test programs link instead of the real one, with cuda_emu_runtime.cpp in place
           of cudart): `k<<<grid, block, smem, stream>>>(args);` becomes
           `::cuda_emu::launch_kernel(k, grid, block, smem, stream, args);` (dim3 grid and block,
           2-D/3-D included; smem and stream default to 0). Writes a .cpp. With
           --allow-no-kernels a file without kernels of its own (host code calling cuBLAS(Lt) and
           other files' launchers: kernels/gemm.cu, kernels/matmul_bf16.cu) is accepted.

What it does, in order (every step checks the pattern it relies on and stops with an error naming
the file, the line and what to change if the pattern is missing, so that a kernel edit that breaks
the emulation fails the build instead of testing something else):
  1. (default mode) the cut at the launcher banner, see above.
  2. Inlines the project headers it includes ("kernels/x.cuh") that hide device code behind
     `#ifdef __CUDACC__` (kernels/common.cuh: warp_sum and friends), with that guard turned on,
     so the emulated kernels use the real helpers; other headers stay #includes.
  3. Rewrites the CUDA-only constructs into cuda_emu calls: __syncthreads, __syncwarp,
     __shfl_*_sync, `extern __shared__ T name[];` (dynamic shared memory), static `__shared__ T
     name[..];` inside a function (one instance per emulated block, shared by its threads:
     cuda_emu::static_smem keyed by a tag unique to the declaration), __ldg and the cache-hinted
     loads/stores (plain accesses), the fast-math intrinsics (__expf, __logf, __powf, __sinf,
     __fdividef, ...: mapped to the PRECISE host functions, so not bit-exact to the device),
     __launch_bounds__(n) (a check of the block size first in the kernel's body), <<<>>> (--whole),
     __cvta_generic_to_shared (the emulator's shared window), and inline PTX `asm` of one
     instruction among mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32,
     ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16, cp.async.{ca,cg}.shared.global
     (with or without src-size), cp.async.commit_group, cp.async.wait_group N and
     cp.async.wait_all (operands parsed from the asm's operand lists and checked against the
     constraints the instruction needs, so the call passes exactly the registers the PTX names).
     Refused, each with its own message: atomics (the kernels have none by design: determinism),
     any other asm (several instructions in one asm statement included), __shared__ outside a
     function, __constant__/__managed__, warp votes and matches, fences, clocks, other cvta
     conversions, wmma, cooperative groups, `__CUDA_ARCH__` branches, and <<<>>> in the default
     mode.
  4. Drops what a host compiler does not need: __global__/__device__/__host__,
     `#pragma unroll`; __forceinline__ -> inline, __noinline__ -> nothing, __align__(n) ->
     alignas(n). threadIdx/blockIdx/blockDim/gridDim are cuda_emu.h's thread-locals, the bf16
     conversions (__float2bfloat16_rn, __bfloat162float, __floats2bfloat162_rn,
     __bfloat1622float2, ...) are cuda_bf16.hpp's host versions, min/max cuda_emu.h's.
Line numbers are kept (#line directives; rewritten statements are padded to their original line
count), so compiler errors and debuggers point into the real .cu.
"""
import argparse
import os
import re
import sys


class GenError(Exception):
    pass


LINE_DIRECTIVE = re.compile(r'^#line (\d+) "([^"]*)"\n', re.M)


def fail(path, text, pos, msg):
    """Raises the error at text[pos], located through the #line directives of inlined headers."""
    if pos is None:
        raise GenError(f'{path}: error: {msg}')
    line, start = 1, 0
    for m in LINE_DIRECTIVE.finditer(text, 0, pos):
        line, path, start = int(m.group(1)), m.group(2), m.end()
    line += text.count('\n', start, pos)
    raise GenError(f'{path}:{line}: error: {msg}')


# ---- small C++ lexing helpers ---------------------------------------------------------------

def skip_string(text, i):
    """text[i] is a quote; returns the index after the closing quote."""
    q = text[i]
    i += 1
    while i < len(text):
        if text[i] == '\\':
            i += 2
            continue
        if text[i] == q:
            return i + 1
        i += 1
    raise ValueError('unterminated string')


def code_mask(text):
    """A copy of text with comments and string/char literals blanked (same length, newlines kept),
    so that pattern searches see only code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = ' '
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != '\n':
                    out[k] = ' '
            i = j
        elif c in '"\'':
            # a digit separator (1'000) is not a char literal
            if c == "'" and i > 0 and text[i - 1].isalnum():
                i += 1
                continue
            j = skip_string(text, i)
            for k in range(i + 1, j - 1):
                if out[k] != '\n':
                    out[k] = ' '
            i = j
        else:
            i += 1
    return ''.join(out)


def matching_paren(masked, open_pos):
    """Index of the ')' matching the '(' at open_pos (in comment/string-masked text)."""
    depth = 0
    for i in range(open_pos, len(masked)):
        if masked[i] == '(':
            depth += 1
        elif masked[i] == ')':
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top(s, sep):
    """Splits s at sep characters that are outside (), [], {} and string literals."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c in '"\'':
            j = skip_string(s, i)
            cur.append(s[i:j])
            i = j
            continue
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        if c == sep and depth == 0:
            parts.append(''.join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append(''.join(cur))
    return parts


def pad_lines(replacement, original):
    """replacement followed by as many newlines as keep the original's line count."""
    extra = original.count('\n') - replacement.count('\n')
    if extra < 0:
        raise AssertionError('replacement longer than the original')
    return replacement + '\n' * extra


# ---- step 1: the cut at the launchers --------------------------------------------------------

LAUNCHER_BANNER = re.compile(r'^// =+\n// Launchers\b[^\n]*\n// =+\n', re.M)


def cut_at_launchers(path, text):
    m = list(LAUNCHER_BANNER.finditer(text))
    if len(m) != 1:
        fail(path, text, None,
             f'expected exactly one launcher banner (a "// ====" line, a "// Launchers" line, a '
             f'"// ====" line) separating the kernels from their host launchers, found {len(m)}; '
             f'the emulator keeps everything above it. Restore the banner or update '
             f'tests/emu/gen_host_kernels.py')
    kept = text[:m[0].start()]
    # The scopes open at the cut must all be namespaces: close them.
    masked = code_mask(kept)
    stack = []
    for tok in re.finditer(r'\bnamespace\b(?:\s+[\w:]+)?\s*\{|[{}]', masked):
        t = tok.group(0)
        if t == '}':
            if not stack:
                fail(path, text, tok.start(), 'unbalanced "}" above the launcher banner')
            stack.pop()
        else:
            stack.append('namespace' if t.startswith('namespace') else 'block')
    if any(s != 'namespace' for s in stack):
        fail(path, text, m[0].start(),
             'the launcher banner is inside a function or class body (only namespaces may be '
             'open there)')
    closing = ''.join('}  // namespace (closed by gen_host_kernels.py)\n' for _ in stack)
    return kept, closing


# ---- step 2: headers whose device part is hidden from host compilers --------------------------

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_PP = r'^([ \t]*#[ \t]*)'  # the start of a preprocessor line, kept
_DEFINED = r'defined[ \t]*\(?[ \t]*__CUDACC__[ \t]*\)?'
CUDACC_ON = re.compile(_PP + r'(ifdef[ \t]+__CUDACC__|if[ \t]+' + _DEFINED + r')[ \t]*$', re.M)
CUDACC_OFF = re.compile(_PP + r'(ifndef[ \t]+__CUDACC__|if[ \t]+!' + _DEFINED + r')[ \t]*$', re.M)


def inline_device_headers(path, text, root, seen, deps):
    def repl(m):
        rel = m.group(1)
        hdr = os.path.join(root, rel)
        if not os.path.isfile(hdr):
            return m.group(0)  # a system or generated header: leave it to the compiler
        with open(hdr, encoding='utf-8') as f:
            body = f.read()
        if '__CUDACC__' not in code_mask(body) or rel in seen:
            return m.group(0)
        seen.add(rel)
        deps.append(hdr)
        body = re.sub(r'^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$', '', body, flags=re.M)
        body, n_on = CUDACC_ON.subn(r'\1if 1  // cuda_emu: __CUDACC__', body)
        body, n_off = CUDACC_OFF.subn(r'\1if 0  // cuda_emu: !__CUDACC__', body)
        if n_on + n_off == 0 or '__CUDACC__' in code_mask(body).replace('cuda_emu: __CUDACC__', ''):
            fail(hdr, body, None,
                 'uses __CUDACC__ in a form the generator does not rewrite (only "#ifdef '
                 '__CUDACC__", "#if defined(__CUDACC__)" and their negations)')
        body = inline_device_headers(hdr, body, root, seen, deps)
        line = text.count('\n', 0, m.start()) + 1
        return (f'// ---- {rel}, inlined with its __CUDACC__ part on (gen_host_kernels.py)\n'
                f'#line 1 "{hdr}"\n{body}\n#line {line + 1} "{path}"')
    return INCLUDE.sub(repl, text)


# ---- step 3: CUDA constructs -> cuda_emu ------------------------------------------------------

MMA_TEMPLATE = re.compile(
    r'^\s*mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32\s*'
    r'\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*;\s*$')
# ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared[::cta].b16 {regs}, [addr];
LDMATRIX_TEMPLATE = re.compile(
    r'^\s*ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?\.shared(?:::cta)?\.b16\s*'
    r'\{([^}]*)\}\s*,\s*\[\s*(%\d+)\s*\]\s*;\s*$')
# cp.async.{ca,cg}.shared[::cta].global [dst], [src], cp-size[, src-size];
CP_ASYNC_TEMPLATE = re.compile(
    r'^\s*cp\.async\.(ca|cg)\.shared(?:::cta)?\.global\s*\[\s*(%\d+)\s*\]\s*,\s*\[\s*(%\d+)\s*\]'
    r'\s*,\s*(%\d+|\d+)\s*(?:,\s*(%\d+|\d+)\s*)?;\s*$')
CP_ASYNC_COMMIT_TEMPLATE = re.compile(r'^\s*cp\.async\.commit_group\s*;\s*$')
CP_ASYNC_WAIT_TEMPLATE = re.compile(r'^\s*cp\.async\.wait_group\s+(%\d+|\d+)\s*;\s*$')
CP_ASYNC_WAIT_ALL_TEMPLATE = re.compile(r'^\s*cp\.async\.wait_all\s*;\s*$')
OPERAND = re.compile(r'^\s*"([^"]*)"\s*\((.*)\)\s*$', re.S)
KNOWN_ASM = ('mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, '
             'ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16, '
             'cp.async.{ca,cg}.shared.global, cp.async.commit_group, cp.async.wait_group, '
             'cp.async.wait_all')


def translate_asm(path, text, pos, stmt):
    """stmt: the whole `asm volatile(...);` statement. Returns the emulator call replacing it."""
    open_pos = stmt.index('(')
    inner = stmt[open_pos + 1:stmt.rindex(')')]
    sections = split_top(inner, ':')
    literal = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0]))
    template = literal.replace('\\n', '').replace('\\t', ' ')

    def operands(sec):
        if not sec.strip():
            return []
        res = []
        for op in split_top(sec, ','):
            om = OPERAND.match(op)
            if not om:
                fail(path, text, pos, f'cannot parse the asm operand "{op.strip()}"')
            res.append((om.group(1), om.group(2).strip()))
        return res

    outs = operands(sections[1]) if len(sections) > 1 else []
    ins = operands(sections[2]) if len(sections) > 2 else []
    ops = outs + ins  # %N numbering: outputs first, then inputs

    def ref(r, what, allowed, literal_ok=False):
        """The C++ expression of one operand reference (%N, or a literal number if allowed)."""
        r = r.strip()
        if literal_ok and re.fullmatch(r'\d+', r):
            return r
        if not re.fullmatch(r'%\d+', r):
            fail(path, text, pos, f'{what}: expected a %N operand reference, got "{r}"')
        k = int(r[1:])
        if k >= len(ops):
            fail(path, text, pos, f'{what}: {r} names no operand')
        cons, expr = ops[k]
        if cons not in allowed:
            fail(path, text, pos, f'{what}: {r} has constraint "{cons}", expected one of '
                                  f'{", ".join(allowed)}')
        return expr

    def group(refs_text, count, what, allowed):
        refs = [r.strip() for r in refs_text.split(',')]
        if len(refs) != count:
            fail(path, text, pos, f'{what} operand group should be {count} %N references, '
                                  f'got "{refs_text}"')
        return [ref(r, what, allowed) for r in refs]

    m = MMA_TEMPLATE.match(template)
    if m:
        if len(sections) < 3:
            fail(path, text, pos, 'mma asm without output and input operand lists')
        d = group(m.group(1), 4, 'mma D', ('+f', '=f'))
        a = group(m.group(2), 4, 'mma A', ('r',))
        b = group(m.group(3), 2, 'mma B', ('r',))
        c = group(m.group(4), 4, 'mma C', ('f', '+f'))
        return (f'{{ const auto cuda_emu_d = ::cuda_emu::mma_m16n8k16_row_col_f32_bf16_bf16_f32('
                f'{{{", ".join(c)}}}, {{{", ".join(a)}}}, {{{", ".join(b)}}}); '
                + ' '.join(f'{e} = cuda_emu_d[{i}];' for i, e in enumerate(d)) + ' }')
    m = LDMATRIX_TEMPLATE.match(template)
    if m:
        num, trans = int(m.group(1)), m.group(2) is not None
        regs = group(m.group(3), num, 'ldmatrix destination', ('=r',))
        addr = ref(m.group(4), 'ldmatrix address', ('r',))
        return (f'{{ const auto cuda_emu_r = ::cuda_emu::ldmatrix_m8n8_b16<{num}, '
                f'{"true" if trans else "false"}>({addr}); '
                + ' '.join(f'{e} = cuda_emu_r[{i}];' for i, e in enumerate(regs)) + ' }')
    m = CP_ASYNC_TEMPLATE.match(template)
    if m:
        if outs:
            fail(path, text, pos, 'cp.async has no output operands')
        dst = ref(m.group(2), 'cp.async destination', ('r',))
        src = ref(m.group(3), 'cp.async source', ('l',))
        size = ref(m.group(4), 'cp.async copy size', ('n',), literal_ok=True)
        args = [dst, src, size]
        if m.group(5):
            args.append(ref(m.group(5), 'cp.async src-size', ('r', 'n'), literal_ok=True))
        return f'::cuda_emu::cp_async_{m.group(1)}({", ".join(args)});'
    if CP_ASYNC_COMMIT_TEMPLATE.match(template):
        return '::cuda_emu::cp_async_commit_group();'
    m = CP_ASYNC_WAIT_TEMPLATE.match(template)
    if m:
        return f'::cuda_emu::cp_async_wait_group({ref(m.group(1), "cp.async.wait_group", ("n",), literal_ok=True)});'
    if CP_ASYNC_WAIT_ALL_TEMPLATE.match(template):
        return '::cuda_emu::cp_async_wait_all();'
    fail(path, text, pos,
         f'inline asm the emulator does not know: "{template.strip()[:90]}". cuda_emu.h models '
         f'only {KNOWN_ASM} (one instruction per asm statement); add the instruction to cuda_emu.h '
         f'and to translate_asm in tests/emu/gen_host_kernels.py')


def rewrite_asm(path, text):
    out, last, n = [], 0, 0
    masked = code_mask(text)
    for m in re.finditer(r'\basm\b(\s+volatile\b)?\s*\(', masked):
        open_pos = m.end() - 1
        close = matching_paren(masked, open_pos)
        if close < 0 or not masked[close + 1:].lstrip().startswith(';'):
            fail(path, text, m.start(), 'cannot find the end of this asm statement')
        end = masked.index(';', close) + 1
        stmt = text[m.start():end]
        out.append(text[last:m.start()])
        out.append(pad_lines(translate_asm(path, text, m.start(), stmt), stmt))
        last = end
        n += 1
    out.append(text[last:])
    return ''.join(out), n


SIMPLE_REWRITES = [
    (re.compile(r'\b__syncthreads\s*\(\s*\)'), '::cuda_emu::syncthreads()'),
    (re.compile(r'\b__syncwarp\s*\('), '::cuda_emu::syncwarp('),
    (re.compile(r'\b__shfl_(xor|down|up)_sync\s*\('), r'::cuda_emu::shfl_\1_sync('),
    (re.compile(r'\b__shfl_sync\s*\('), '::cuda_emu::shfl_sync('),
    # Loads and stores with cache hints: plain accesses.
    (re.compile(r'\b__ld(?:g|ca|cg|cs|lu|cv)\s*\('), '::cuda_emu::ldg('),
    (re.compile(r'\b__st(?:cg|cs|wb|wt)\s*\('), '::cuda_emu::st('),
    # Fast-math intrinsics -> the PRECISE host functions (not bit-exact to the device's
    # approximations; the kernels are built without fast math, these are explicit calls).
    (re.compile(r'\b__(expf|exp10f|logf|log2f|log10f|sinf|cosf|tanf|powf|sincosf)\s*\('), r'\1('),
    (re.compile(r'\b__fsqrt_rn\s*\('), 'sqrtf('),
    (re.compile(r'\b__fmaf_rn\s*\('), 'fmaf('),
    (re.compile(r'\b__(fdividef|saturatef|frcp_rn|fadd_rn|fsub_rn|fmul_rn|fdiv_rn)\s*\('),
     r'::cuda_emu::\1('),
    (re.compile(r'\b__frsqrt_rn\s*\('), '::cuda_emu::rsqrtf('),
    (re.compile(r'(?<![\w:.])rsqrtf?\s*\('), lambda m: '::cuda_emu::' + m.group(0)),
    # The shared-window address of a shared-memory pointer (ldmatrix and cp.async operands).
    (re.compile(r'\b__cvta_generic_to_shared\s*\('), '::cuda_emu::cvta_generic_to_shared('),
]
EXTERN_SHARED = re.compile(
    r'\bextern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+'
    r'(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_]\w*)\s*\[\s*\]\s*;')
_DECLARATOR = r'[A-Za-z_]\w*\s*(?:\[[^\[\];]+\]\s*)*'
STATIC_SHARED = re.compile(
    r'\b__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+'
    r'(?:__align__\s*\(\s*(\d+)\s*\)\s+)?(' + _DECLARATOR + r'(?:,\s*' + _DECLARATOR + r')*);')
QUALIFIERS = [
    (re.compile(r'\b__global__\s+'), ''),
    (re.compile(r'\b__device__\s+'), ''),
    (re.compile(r'\b__host__\s+'), ''),
    (re.compile(r'\b__forceinline__\b'), 'inline'),
    (re.compile(r'\b__noinline__\b'), ''),
    (re.compile(r'\b__align__\s*\(\s*(\d+)\s*\)'), r'alignas(\1)'),
    (re.compile(r'^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*$', re.M), ''),
]
# Atomics: none by design (every reduction has a fixed order, kernels/README.md); not emulated.
ATOMICS = re.compile(r'\batomic[A-Z]\w*\s*\(|\b__atomic_\w+|\bcuda::(?:std::)?atomic\w*|'
                     r'\b__nv_atomic\w*')  # (atom./red. PTX is refused with any other asm)
# Device constructs with no emulation: refused with their name and line.
UNSUPPORTED = re.compile(
    r'<<<|\b__shared__\b|\b__constant__\b|\b__managed__\b|'
    r'\b__(?:syncthreads_\w+|ballot_sync|any_sync|all_sync|uni_sync|activemask|match_\w+|'
    r'reduce_\w+_sync|threadfence\w*|nanosleep|trap|brkpt|clock\w*|globaltimer|cvta\w*|isShared|'
    r'isGlobal)\b|'
    r'\bcp\.async\b|\bwmma::|\bcooperative_groups\b|\basm\b')


def scope_stack(path, text, masked, pos):
    """The kinds of the scopes open at pos: 'namespace' or 'block' (functions, classes, ...)."""
    stack = []
    for tok in re.finditer(r'\bnamespace\b(?:\s+[\w:]+)?\s*\{|\bextern\s+"\s*"\s*\{|[{}]',
                           masked[:pos]):
        t = tok.group(0)
        if t == '}':
            if not stack:
                fail(path, text, tok.start(), 'unbalanced "}"')
            stack.pop()
        else:
            stack.append('block' if t == '{' else 'namespace')
    return stack


def edit(text, edits):
    """Applies (start, end, replacement) edits (non-overlapping) to text."""
    out, last = [], 0
    for a, b, rep in sorted(edits):
        if a < last:
            raise AssertionError('overlapping edits')
        out.append(text[last:a])
        out.append(rep)
        last = b
    out.append(text[last:])
    return ''.join(out)


def rewrite_static_shared(path, text):
    """`__shared__ T name[dims];` in a function -> a reference to the block's instance."""
    masked = code_mask(text)
    edits = []
    for m in STATIC_SHARED.finditer(masked):
        if 'block' not in scope_stack(path, text, masked, m.start()):
            fail(path, text, m.start(),
                 '__shared__ variable outside a function: the emulator keeps shared memory per '
                 'block and can only place declarations inside kernels or device functions')
        align_a, ty, align_b, declarators = m.groups()
        ty = ty.strip()
        align = align_a or align_b or f'alignof({ty})'
        reps = []
        for decl in split_top(text[m.start(4):m.end(4)], ','):
            dm = re.fullmatch(r'\s*([A-Za-z_]\w*)\s*(.*?)\s*', decl, re.S)
            name, dims = dm.group(1), re.sub(r'\s+', '', dm.group(2))
            tag = f'cuda_emu_smem_tag_{name}'
            ref = f'{ty} (&{name}){dims}' if dims else f'{ty}& {name}'
            reps.append(f'static constexpr char {tag} = 0; {ref} = '
                        f'::cuda_emu::static_smem<{ty}{dims}, {align}>(&{tag});')
        edits.append((m.start(), m.end(), pad_lines(' '.join(reps), text[m.start():m.end()])))
    return edit(text, edits), len(edits)


def rewrite_launches(path, text):
    """`kernel<<<grid, block[, smem[, stream]]>>>(args);` -> ::cuda_emu::launch_kernel(...)."""
    masked = code_mask(text)
    edits = []
    for m in re.finditer(r'<<<', masked):
        lt = m.start()
        # The kernel expression before <<<: [ns::]name[<template args>], whitespace allowed.
        i = lt
        while i > 0 and masked[i - 1].isspace():
            i -= 1
        if i > 0 and masked[i - 1] == '>':
            depth = 0
            while i > 0:
                i -= 1
                c = masked[i]
                if c == '>':
                    depth += 1
                elif c == '<':
                    depth -= 1
                    if depth == 0:
                        break
            while i > 0 and masked[i - 1].isspace():
                i -= 1
        km = re.search(r'(?:::)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*$', masked[:i])
        if not km:
            fail(path, text, lt, 'cannot find the kernel named before this <<<')
        kstart = km.start()
        gt = masked.find('>>>', lt + 3)
        if gt < 0:
            fail(path, text, lt, 'no ">>>" closing this <<<')
        config = split_top(text[lt + 3:gt], ',')
        if not 2 <= len(config) <= 4 or not all(c.strip() for c in config):
            fail(path, text, lt, f'a launch configuration needs 2 to 4 parts (grid, block, shared '
                                 f'memory bytes, stream), got {len(config)}')
        open_pos = gt + 3
        while open_pos < len(masked) and masked[open_pos].isspace():
            open_pos += 1
        if open_pos >= len(masked) or masked[open_pos] != '(':
            fail(path, text, lt, 'expected the kernel arguments "(...)" after ">>>"')
        close = matching_paren(masked, open_pos)
        if close < 0:
            fail(path, text, lt, 'unbalanced kernel argument list')
        semi = close + 1
        while semi < len(masked) and masked[semi].isspace():
            semi += 1
        if semi >= len(masked) or masked[semi] != ';':
            fail(path, text, lt, 'a kernel launch must be a statement of its own ("...);")')
        kname = text[kstart:lt].rstrip()
        n1 = text.count('\n', kstart + len(kname), lt)     # kernel name ... <<<
        n2 = text.count('\n', gt + 3, open_pos)            # >>> ... (
        parts = config + ['0', 'cudaStream_t(0)'][len(config) - 2:]
        args = text[open_pos + 1:close]
        rep = (f'::cuda_emu::launch_kernel({kname},' + '\n' * n1 + ' ' + ','.join(parts) +
               (',' + '\n' * n2 + ' ' + args if args.strip() else '\n' * n2) + ')' +
               text[close + 1:semi] + ';')
        rep = pad_lines(rep, text[kstart:semi + 1])
        edits.append((kstart, semi + 1, rep))
    return edit(text, edits), len(edits)


def rewrite_launch_bounds(path, text):
    """__launch_bounds__(n, ...) -> removed, and `::cuda_emu::launch_bounds(n);` first in the body
    of the kernel it decorates (a declaration without a body gets nothing)."""
    masked = code_mask(text)
    edits = []
    for m in re.finditer(r'\b__launch_bounds__\s*\(', masked):
        close = matching_paren(masked, m.end() - 1)
        if close < 0:
            fail(path, text, m.start(), 'unbalanced __launch_bounds__(')
        max_threads = split_top(text[m.end():close], ',')[0].strip()
        edits.append((m.start(), close + 1, '\n' * text.count('\n', m.start(), close + 1)))
        params = masked.find('(', close + 1)
        pclose = matching_paren(masked, params) if params >= 0 else -1
        if pclose < 0:
            fail(path, text, m.start(), 'cannot find the parameter list of this kernel')
        j = pclose + 1
        while j < len(masked) and masked[j].isspace():
            j += 1
        if j < len(masked) and masked[j] == '{':
            edits.append((j + 1, j + 1, f' ::cuda_emu::launch_bounds({max_threads});'))
        elif j >= len(masked) or masked[j] != ';':
            fail(path, text, m.start(), 'expected "{" or ";" after this kernel\'s parameter list')
    return edit(text, edits)


def rewrite_cuda(path, text, whole=False):
    masked = code_mask(text)
    am = ATOMICS.search(masked)
    if am:
        fail(path, text, am.start(),
             f'"{am.group(0).strip()}": atomics are not emulated (tests/emu/cuda_emu.h) and the '
             f'kernels have none by design (fixed-order reductions, determinism); reduce with a '
             f'fixed partition instead')
    text, n_asm = rewrite_asm(path, text)
    n_launch = 0
    if whole:
        text, n_launch = rewrite_launches(path, text)
    for rx, rep in SIMPLE_REWRITES:
        text = rx.sub(rep, text)

    def shared(m):
        ty, name = m.group(1).strip(), m.group(2)
        return f'{ty}* {name} = ::cuda_emu::dynamic_smem<{ty}>();'
    text = EXTERN_SHARED.sub(shared, text)
    text, n_static = rewrite_static_shared(path, text)
    text = rewrite_launch_bounds(path, text)
    for rx, rep in QUALIFIERS:
        text = rx.sub(rep, text)
    masked = code_mask(text)
    bad = UNSUPPORTED.search(masked)
    if bad:
        what = bad.group(0).strip()
        hint = ''
        if what == '<<<':
            hint = ' (launches are rewritten only with --whole)'
        elif what == '__shared__':
            hint = (' (a static shared variable must read "__shared__ [__align__(n)] T name[dims];" '
                    'inside a function)')
        fail(path, text, bad.start(),
             f'"{what}" has no emulation in tests/emu/cuda_emu.h (or is not rewritten by '
             f'tests/emu/gen_host_kernels.py){hint}: add it there or keep it out of the kernels')
    arch_guard = r'^[ \t]*#[ \t]*(?:if|elif)[^\n]*__CUDA_ARCH__[^\n]*\n[ \t]*#[ \t]*error\b'
    for am in re.finditer(arch_guard, masked, re.M):
        masked = masked[:am.start()] + ' ' * (am.end() - am.start()) + masked[am.end():]
    arch = re.search(r'__CUDA_ARCH__', masked)
    if arch:
        fail(path, text, arch.start(),
             '__CUDA_ARCH__ selects code that the host compiler would drop silently (only an '
             '"#if ... __CUDA_ARCH__ ...\\n#error" guard is allowed)')
    return text, {'asm': n_asm, 'launches': n_launch, 'static_shared': n_static}


# ---- driver ----------------------------------------------------------------------------------

def generate(src, root, whole=False, allow_no_kernels=False):
    with open(src, encoding='utf-8') as f:
        text = f.read()
    src = os.path.abspath(src)
    if whole:
        kept, closing = text, ''
    else:
        kept, closing = cut_at_launchers(src, text)
    kernels = re.findall(r'\b__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(',
                         code_mask(kept))
    if not kernels and not (whole and allow_no_kernels):
        fail(src, text, None, 'no __global__ kernel' + ('' if whole else ' above the launcher banner'))
    deps = []
    kept = inline_device_headers(src, kept, os.path.abspath(root), set(), deps)
    body, n = rewrite_cuda(src, kept, whole)
    what = ('the whole file, launchers included,' if whole else 'the kernels above its launcher '
            'banner')
    header = (
        f'// GENERATED by tests/emu/gen_host_kernels.py from {os.path.relpath(src, root)}: do not '
        f'edit.\n// {what} as host C++ for the CPU emulator (tests/emu/cuda_emu.h).\n'
        f'// Kernels: {", ".join(sorted(set(kernels))) or "none (host code only)"}; rewritten: {n["asm"]} inline asm statements, '
        f'{n["launches"]} launches, {n["static_shared"]} static __shared__ declarations.\n'
        + ('' if whole else '#pragma once\n') +
        f'#include "cuda_emu.h"\n#line 1 "{src}"\n')
    return header + body + '\n' + closing, deps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--src', required=True, help='the .cu file')
    ap.add_argument('--root', required=True, help='repository root (for "kernels/x.cuh" includes)')
    ap.add_argument('--out', required=True, help='the .inc (or, with --whole, .cpp) to write')
    ap.add_argument('--whole', action='store_true',
                    help='the whole file with its launchers (<<<>>> -> cuda_emu::launch_kernel)')
    ap.add_argument('--allow-no-kernels', action='store_true',
                    help='with --whole: accept a .cu with launchers/host code only (kernels/gemm.cu, '
                         'kernels/matmul_bf16.cu call cuBLAS(Lt) and launch other files\' kernels)')
    args = ap.parse_args()
    try:
        out, _ = generate(args.src, args.root, args.whole, args.allow_no_kernels)
    except GenError as e:
        print(e, file=sys.stderr)
        print('gen_host_kernels.py: the CPU emulation of the kernels cannot be generated; see '
              'tests/emu/gen_host_kernels.py for the patterns it needs', file=sys.stderr)
        sys.exit(1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(out)
    os.replace(tmp, args.out)


if __name__ == '__main__':
    main()
