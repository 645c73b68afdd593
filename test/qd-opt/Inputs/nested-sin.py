"""Prints a kernel whose blocks nest argv[1] levels deep (the serial task is
level 1): one-iteration loops around v = sin(v), differentiable in @x."""
import sys

depth = int(sys.argv[1])
loops = depth - 1
lines = ['field @x : f32[1] grad', 'field @y : f32[1] grad', '', 'kernel @k() {', '  serial {',
         '    %z = const 0 : i32', '    %v = alloca f32', '    %a = load @x[%z] : f32',
         '    store %v, %a']
lines += ['for %%i%d = 0 to 1 {' % i for i in range(loops)]
lines += ['%cur = load %v : f32', '%s = sin %cur : f32', 'store %v, %s']
lines += ['}'] * loops
lines += ['    %r = load %v : f32', '    store @y[%z], %r', '  }', '}']
print('\n'.join(lines))
