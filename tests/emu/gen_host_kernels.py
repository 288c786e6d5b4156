#!/usr/bin/env python3
"""Turns the kernel part of a CUDA source into host C++ that runs on the CPU emulator (cuda_emu.h).

  gen_host_kernels.py --src kernels/flash_attention.cu --root <repo> --out flash_attention_host.inc

What it does, in order (every step checks the pattern it relies on and stops with an error naming
the file, the line and what to change if the pattern is missing, so that a kernel edit that breaks
the emulation fails the build instead of testing something else):
  1. Cuts the source at its launcher banner (a `// ====` line, a `// Launchers` line, a `// ====`
     line): launchers (<<<>>>, cudaFuncSetAttribute) stay on the GPU; kernels, device helpers and
     host constants before the banner are kept. The namespaces open at the cut are closed.
  2. Inlines the project headers it includes ("kernels/x.cuh") that hide device code behind
     `#ifdef __CUDACC__` (kernels/common.cuh: warp_sum and friends), with that guard turned on,
     so the emulated kernels use the real helpers; other headers stay #includes.
  3. Rewrites the CUDA-only constructs into cuda_emu calls: __syncthreads, __syncwarp,
     __shfl_*_sync, `extern __shared__ T name[];` (dynamic shared memory), and inline PTX `asm`
     that is an mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (operands parsed from the
     asm's operand lists, so the call passes exactly the registers the PTX names). Any other asm,
     static __shared__ arrays, atomics, <<<>>> or other intrinsics are refused.
  4. Drops what a host compiler does not need: __global__/__device__/__host__, __launch_bounds__,
     `#pragma unroll`; __forceinline__ -> inline, __align__(n) -> alignas(n).
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
        body = open(hdr, encoding='utf-8').read()
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
OPERAND = re.compile(r'^\s*"([^"]*)"\s*\((.*)\)\s*$', re.S)


def translate_asm(path, text, pos, stmt):
    """stmt: the whole `asm volatile(...);` statement. Returns the emulator call replacing it."""
    open_pos = stmt.index('(')
    inner = stmt[open_pos + 1:stmt.rindex(')')]
    sections = split_top(inner, ':')
    literal = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0]))
    template = literal.replace('\\n', '').replace('\\t', ' ')
    m = MMA_TEMPLATE.match(template)
    if not m:
        fail(path, text, pos,
             f'inline asm the emulator does not know: "{template.strip()[:90]}". cuda_emu.h models '
             f'only mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32; add the instruction to '
             f'cuda_emu.h and to translate_asm in tests/emu/gen_host_kernels.py')
    if len(sections) < 3:
        fail(path, text, pos, 'mma asm without output and input operand lists')

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

    outs, ins = operands(sections[1]), operands(sections[2])
    ops = outs + ins  # %N numbering: outputs first, then inputs

    def group(idx, count, what, allowed):
        refs = [r.strip() for r in m.group(idx).split(',')]
        if len(refs) != count or not all(re.fullmatch(r'%\d+', r) for r in refs):
            fail(path, text, pos, f'mma {what} operand group should be {count} %N references, '
                                  f'got "{m.group(idx)}"')
        exprs = []
        for r in refs:
            k = int(r[1:])
            if k >= len(ops):
                fail(path, text, pos, f'mma {what}: {r} names no operand')
            cons, expr = ops[k]
            if cons not in allowed:
                fail(path, text, pos, f'mma {what}: operand {r} has constraint "{cons}", '
                                      f'expected one of {allowed}')
            exprs.append(expr)
        return exprs

    d = group(1, 4, 'D', ('+f', '=f'))
    a = group(2, 4, 'A', ('r',))
    b = group(3, 2, 'B', ('r',))
    c = group(4, 4, 'C', ('f', '+f'))
    call = (f'{{ const auto cuda_emu_d = ::cuda_emu::mma_m16n8k16_row_col_f32_bf16_bf16_f32('
            f'{{{", ".join(c)}}}, {{{", ".join(a)}}}, {{{", ".join(b)}}}); '
            + ' '.join(f'{e} = cuda_emu_d[{i}];' for i, e in enumerate(d)) + ' }')
    return call


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
]
EXTERN_SHARED = re.compile(
    r'\bextern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+'
    r'(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_]\w*)\s*\[\s*\]\s*;')
QUALIFIERS = [
    (re.compile(r'\b__global__\s+'), ''),
    (re.compile(r'\b__device__\s+'), ''),
    (re.compile(r'\b__host__\s+'), ''),
    (re.compile(r'\b__forceinline__\b'), 'inline'),
    (re.compile(r'\b__noinline__\b'), ''),
    (re.compile(r'\b__align__\s*\(\s*(\d+)\s*\)'), r'alignas(\1)'),
    (re.compile(r'^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*$', re.M), ''),
]
# Device constructs with no emulation: refused with their name and line.
UNSUPPORTED = re.compile(
    r'<<<|\b__shared__\b|\b__constant__\b|\b__managed__\b|\batomic[A-Z]\w*\s*\(|'
    r'\b__(?:syncthreads_\w+|ballot_sync|any_sync|all_sync|uni_sync|activemask|match_\w+|'
    r'reduce_\w+_sync|threadfence\w*|ldg|ldcg|ldca|ldcs|ldlu|ldcv|stcg|stcs|stwb|stwt|'
    r'nanosleep|trap|brkpt|clock\w*|globaltimer|cvta\w*|isShared|isGlobal)\b|'
    r'\bcp\.async\b|\bwmma::|\bcooperative_groups\b|\basm\b')


def rewrite_cuda(path, text):
    text, n_asm = rewrite_asm(path, text)
    for rx, rep in SIMPLE_REWRITES:
        text = rx.sub(rep, text)

    def shared(m):
        ty, name = m.group(1).strip(), m.group(2)
        return f'{ty}* {name} = ::cuda_emu::dynamic_smem<{ty}>();'
    text = EXTERN_SHARED.sub(shared, text)
    for rx, rep in QUALIFIERS:
        text = rx.sub(rep, text)
    text = strip_launch_bounds(path, text)
    masked = code_mask(text)
    bad = UNSUPPORTED.search(masked)
    if bad:
        fail(path, text, bad.start(),
             f'"{bad.group(0).strip()}" has no emulation in tests/emu/cuda_emu.h (or is not '
             f'rewritten by tests/emu/gen_host_kernels.py): add it there or keep it out of the '
             f'kernels')
    arch_guard = r'^[ \t]*#[ \t]*(?:if|elif)[^\n]*__CUDA_ARCH__[^\n]*\n[ \t]*#[ \t]*error\b'
    for am in re.finditer(arch_guard, masked, re.M):
        masked = masked[:am.start()] + ' ' * (am.end() - am.start()) + masked[am.end():]
    arch = re.search(r'__CUDA_ARCH__', masked)
    if arch:
        fail(path, text, arch.start(),
             '__CUDA_ARCH__ selects code that the host compiler would drop silently (only an '
             '"#if ... __CUDA_ARCH__ ...\\n#error" guard is allowed)')
    return text, n_asm


def strip_launch_bounds(path, text):
    masked = code_mask(text)
    out, last = [], 0
    for m in re.finditer(r'\b__launch_bounds__\s*\(', masked):
        close = matching_paren(masked, m.end() - 1)
        if close < 0:
            fail(path, text, m.start(), 'unbalanced __launch_bounds__(')
        out.append(text[last:m.start()])
        out.append('\n' * text.count('\n', m.start(), close + 1))
        last = close + 1
    out.append(text[last:])
    return ''.join(out)


# ---- driver ----------------------------------------------------------------------------------

def generate(src, root):
    text = open(src, encoding='utf-8').read()
    src = os.path.abspath(src)
    kept, closing = cut_at_launchers(src, text)
    kernels = re.findall(r'\b__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(',
                         code_mask(kept))
    if not kernels:
        fail(src, text, None, 'no __global__ kernel above the launcher banner')
    deps = []
    kept = inline_device_headers(src, kept, os.path.abspath(root), set(), deps)
    body, n_asm = rewrite_cuda(src, kept)
    header = (
        f'// GENERATED by tests/emu/gen_host_kernels.py from {os.path.relpath(src, root)}: do not '
        f'edit.\n// The kernels above its launcher banner as host C++ for the CPU emulator '
        f'(tests/emu/cuda_emu.h).\n'
        f'// Kernels: {", ".join(sorted(set(kernels)))}; inline mma asm rewritten: {n_asm}.\n'
        f'#pragma once\n#include "cuda_emu.h"\n#line 1 "{src}"\n')
    return header + body + '\n' + closing, deps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--src', required=True, help='the .cu file')
    ap.add_argument('--root', required=True, help='repository root (for "kernels/x.cuh" includes)')
    ap.add_argument('--out', required=True, help='the .inc to write')
    args = ap.parse_args()
    try:
        out, _ = generate(args.src, args.root)
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
