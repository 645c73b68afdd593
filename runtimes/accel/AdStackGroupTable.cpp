//===- AdStackGroupTable.cpp - The table of a compacted adstack heap ------===//
#include "AdStackGroupTable.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <absl/status/status.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

namespace qd::accel {

namespace {

// Pass 1, per group g of %lanes threads: for each stack, the largest need
// of the iterations its threads run (a stack that is not measured: its
// capacity; 0 for a group whose threads run no iteration), folded into its
// column's capacity (table[g * stacks + column], the largest over the
// column's stacks); each column's region (lanes x capacity x the column's
// entry bytes, rounded up to %unit); the group's bytes (table[pairs + g])
// and the bytes of each thread's own need (table[pairs + groups + g]);
// with 32 lanes also the candidates (below: CAND_*). Pass 2, per block of
// `block` groups: the exclusive scan of its groups' bytes in place and the
// block's sums, and its sums of two more per-group numbers (below). Pass
// 3 (one thread): the exclusive scan of the blocks' bytes (from `base`)
// and the totals (sums[0], sums[1], sums[2 + k], sums[8], sums[9]); the
// blocks' sums are at sums[10 + b] (bytes), sums[10 + blocks + b] (own
// needs), sums[10 + (2 + k) * blocks + b] (candidates) and sums[10 + (8 +
// j) * blocks + b]; j = 0: the regions' bytes with one column per stack,
// j = 1: with one column for every stack (pass 1 computes both, per group,
// whatever the columns of this run); the header of
// `offsets` and its last entry, the heap's end in units. Pass 4, per
// group: each column's region's offset in units (its block's start plus
// its own) at offsets[head + g * columns + column]. Where a stack's desc
// names a row of `rows` (an optimistic launch's per-iteration
// capacities), pass 1 also writes the group's capacity there for each
// iteration its threads run. Sums are i64; indices i32
// (Program::perIterationNeeds keeps slot * spread below 2^30).
constexpr const char *kTableKernel = R"(
kernel @NAME(%need: NEED_TYPE, %desc: ndarray<i64, 1>,
                            %table: ndarray<i64, 1>, %sums: ndarray<i64, 1>,
                            %rows: ndarray<i64, 2>, %offsets: ndarray<i32, 1>, %groups: i32,
                            %stacks: i32, %columns: i32, %threads: i32, %begin: i32, %end: i32,
                            %spread: i32, %unit: i64, %base: i64, %block: i32,
                            %blocks: i32, %lanes: i32) {
  %one = const 1 : i32
  %two = const 2 : i32
  %three = const 3 : i32
  %four = const 4 : i32
  %five = const 5 : i32
  %six = const 6 : i32
  %seven = const 7 : i32
  %eight = const 8 : i32
  %full = const 32 : i32
  %head = const 10 : i32
  %zero = const 0 : i32
  %zero64 = const 0 : i64
  %one64 = const 1 : i64
  %unitm1 = sub %unit, %one64 : i64
  %lanes64 = cast %lanes : i32 to i64
  %mask = sub %spread, %one : i32
  %pairs = mul %groups, %stacks : i32
  %exacts = add %pairs, %groups : i32
  %alts = add %exacts, %groups : i32
  %alts2 = add %alts, %groups : i32
  %cands = add %alts2, %groups : i32
  %hstacks = mul %stacks, %three : i32
  %header = add %hstacks, %one : i32
  parallel for %g = 0 to %groups {
    %bytes = alloca i64
    %exact = alloca i64
    %apart = alloca i64
    %amax = alloca i64
    %aeb = alloca i64
    store %bytes, %zero64
    store %exact, %zero64
    store %apart, %zero64
    store %amax, %zero64
    store %aeb, %zero64
CAND_INIT
    %gl = mul %g, %lanes : i32
    %gn = mul %g, %stacks : i32
    for %z = 0 to %stacks {
      %zAt = add %gn, %z : i32
      store %table[%zAt], %zero64
    }
    for %s = 0 to %stacks {
      %d = mul %s, %eight : i32
      %d1 = add %d, %one : i32
      %d2 = add %d, %two : i32
      %d3 = add %d, %three : i32
      %d4 = add %d, %four : i32
      %eb = load %desc[%d] : i64
      %slot = load %desc[%d1] : i64
      %fixed = load %desc[%d2] : i64
      %capsRow = load %desc[%d3] : i64
      %column = load %desc[%d4] : i64
      %measured = cmp ge %slot, %zero64 : i64
      %slot32 = cast %slot : i64 to i32
      %sbase = mul %slot32, %spread : i32
      %gcap = alloca i64
      store %gcap, %zero64
SUB_INIT
      for %l = 0 to %lanes {
        %t = add %gl, %l : i32
        %first = add %begin, %t : i32
        %grid = cmp lt %t, %threads : i32
        %some = cmp lt %first, %end : i32
        %active = and %grid, %some : i1
        %left = sub %end, %first : i32
        %tm1 = sub %threads, %one : i32
        %num = add %left, %tm1 : i32
        %cnt0 = div %num, %threads : i32
        %cnt1 = max %cnt0, %zero : i32
        %on = and %measured, %active : i1
        %cnt = select %on, %cnt1, %zero : i32
        %tcap = alloca i64
        store %tcap, %fixed
        for %k = 0 to %cnt {
          %kt = mul %k, %threads : i32
          %i = add %first, %kt : i32
NEED_LOAD
          %old = load %tcap : i64
          %m = max %old, %v : i64
          store %tcap, %m
        }
        %tc = load %tcap : i64
        %gold = load %gcap : i64
        %gmine = select %active, %tc, %zero64 : i64
        %gm = max %gold, %gmine : i64
        store %gcap, %gm
        %tb = mul %tc, %eb : i64
        ROUND %tb8 = %tb
        %mine = select %active, %tb8, %zero64 : i64
        %eold = load %exact : i64
        %enew = add %eold, %mine : i64
        store %exact, %enew
        %l1 = add %l, %one : i32
CAND_LANE
      }
      %gc = load %gcap : i64
      %writes = cmp ge %capsRow, %zero64 : i64
      %row = cast %capsRow : i64 to i32
      for %cl = 0 to %lanes {
        %wt = add %gl, %cl : i32
        %wfirst = add %begin, %wt : i32
        %wgrid = cmp lt %wt, %threads : i32
        %wleft = sub %end, %wfirst : i32
        %wtm1 = sub %threads, %one : i32
        %wnum = add %wleft, %wtm1 : i32
        %wcnt0 = div %wnum, %threads : i32
        %wcnt1 = max %wcnt0, %zero : i32
        %won = and %writes, %wgrid : i1
        %wcnt = select %won, %wcnt1, %zero : i32
        for %ck = 0 to %wcnt {
          %qt = mul %ck, %threads : i32
          %qi = add %wfirst, %qt : i32
          %col = sub %qi, %begin : i32
          store %rows[%row, %col], %gc
        }
      }
      %arb = mul %gc, %eb : i64
      %arl = mul %arb, %lanes64 : i64
      ROUND %areg = %arl
      %apo = load %apart : i64
      %apn = add %apo, %areg : i64
      store %apart, %apn
      %amo = load %amax : i64
      %amn = max %amo, %gc : i64
      store %amax, %amn
      %aeo = load %aeb : i64
      %aen = add %aeo, %eb : i64
      store %aeb, %aen
      %column32 = cast %column : i64 to i32
      %e = add %gn, %column32 : i32
      %cold = load %table[%e] : i64
      %cnew = max %cold, %gc : i64
      store %table[%e], %cnew
    }
    for %r = 0 to %stacks {
REGION(r)
      %bold = load %bytes : i64
      %bnew = add %bold, %rregion : i64
      store %bytes, %bnew
    }
    %gb = load %bytes : i64
    %gbAt = add %pairs, %g : i32
    store %table[%gbAt], %gb
    %ge = load %exact : i64
    %geAt = add %exacts, %g : i32
    store %table[%geAt], %ge
    %gap = load %apart : i64
    %gapAt = add %alts, %g : i32
    store %table[%gapAt], %gap
    %gam = load %amax : i64
    %gae = load %aeb : i64
    %gsb = mul %gam, %gae : i64
    %gsl = mul %gsb, %lanes64 : i64
    ROUND %gshared = %gsl
    %gshAt = add %alts2, %g : i32
    store %table[%gshAt], %gshared
    %sizedG = cmp eq %lanes, %full : i32
    if %sizedG {
CAND_STORE
    }
  }
  parallel for %b = 0 to %blocks {
    %lo = mul %b, %block : i32
    %hiAll = add %lo, %block : i32
    %hi = min %hiAll, %groups : i32
    %inBlock = sub %hi, %lo : i32
    %blockFirst = add %pairs, %lo : i32
SCAN_BLOCK
    %bAt = add %b, %head : i32
    %blockRun = load %brun : i64
    store %sums[%bAt], %blockRun
    %bAt1 = add %bAt, %blocks : i32
    %blockAll = load %ball : i64
    store %sums[%bAt1], %blockAll
    %sizedB = cmp eq %lanes, %full : i32
    %candCount = select %sizedB, %inBlock, %zero : i32
CAND_BLOCK
    for %aj = 0 to %two {
      %ajg = mul %aj, %groups : i32
      %ajs = add %alts, %ajg : i32
      %ajf = add %ajs, %lo : i32
      %ajacc = alloca i64
      store %ajacc, %zero64
      for %ah = 0 to %inBlock {
        %ahi = add %ajf, %ah : i32
        %ahv = load %table[%ahi] : i64
        %aho = load %ajacc : i64
        %ahn = add %aho, %ahv : i64
        store %ajacc, %ahn
      }
      %ajk = add %aj, %eight : i32
      %ajw = mul %ajk, %blocks : i32
      %ajx = add %head, %ajw : i32
      %ajy = add %ajx, %b : i32
      %ajz = load %ajacc : i64
      store %sums[%ajy], %ajz
    }
  }
  serial {
    %sizedS = cmp eq %lanes, %full : i32
    %candBlocks = select %sizedS, %blocks, %zero : i32
SCAN_SUMS
CAND_TOTAL
    for %zj = 0 to %two {
      %zjacc = alloca i64
      store %zjacc, %zero64
      %zjk = add %zj, %eight : i32
      %zjw = mul %zjk, %blocks : i32
      %zjx = add %head, %zjw : i32
      for %zb = 0 to %blocks {
        %zbi = add %zjx, %zb : i32
        %zbv = load %sums[%zbi] : i64
        %zbo = load %zjacc : i64
        %zbn = add %zbo, %zbv : i64
        store %zjacc, %zbn
      }
      %zjz = load %zjacc : i64
      %zjAt = add %zj, %eight : i32
      store %sums[%zjAt], %zjz
    }
    %rend = load %srun : i64
    %used = sub %rend, %base : i64
    store %sums[%zero], %used
    %aend = load %sall : i64
    store %sums[%one], %aend
    %endUnits = div %rend, %unit : i64
    %endUnits32 = cast %endUnits : i64 to i32
    %entries = mul %groups, %columns : i32
    %lastAt = add %header, %entries : i32
    store %offsets[%lastAt], %endUnits32
    store %offsets[%zero], %columns
    for %h = 0 to %stacks {
      %hd = mul %h, %eight : i32
      %hw = mul %h, %three : i32
      %hw1 = add %hw, %one : i32
      %hw2 = add %hw, %two : i32
      %hw3 = add %hw, %three : i32
      %hd4 = add %hd, %four : i32
      %hd5 = add %hd, %five : i32
      %hd6 = add %hd, %six : i32
      %hcol = load %desc[%hd4] : i64
      %hpre = load %desc[%hd5] : i64
      %heb = load %desc[%hd6] : i64
      %hcol32 = cast %hcol : i64 to i32
      %hpre32 = cast %hpre : i64 to i32
      %heb32 = cast %heb : i64 to i32
      store %offsets[%hw1], %hcol32
      store %offsets[%hw2], %hpre32
      store %offsets[%hw3], %heb32
    }
  }
  parallel for %q = 0 to %groups {
    %qAt = add %pairs, %q : i32
    %inner = load %table[%qAt] : i64
    %qb = div %q, %block : i32
    %qbAt = add %qb, %head : i32
    %outer = load %sums[%qbAt] : i64
    %start = add %inner, %outer : i64
    %cur = alloca i64
    store %cur, %start
    %qn = mul %q, %stacks : i32
    %qk = mul %q, %columns : i32
    %qh = add %header, %qk : i32
    for %u = 0 to %stacks {
      %c0 = load %cur : i64
      %off = div %c0, %unit : i64
      %off32 = cast %off : i64 to i32
      %pfd = mul %u, %eight : i32
      %pfd7 = add %pfd, %seven : i32
      %pfirst = load %desc[%pfd7] : i64
      %pis = cmp ne %pfirst, %zero64 : i64
      if %pis {
        %pfd4 = add %pfd, %four : i32
        %pcol = load %desc[%pfd4] : i64
        %pcol32 = cast %pcol : i64 to i32
        %pAt = add %qh, %pcol32 : i32
        store %offsets[%pAt], %off32
      }
REGION(u)
      %c1 = add %c0, %uregion : i64
      store %cur, %c1
    }
  }
}
)";

/// The bytes of the region of group NAME's column whose first stack is
/// stack %X (0 where %X is not the first of its column): lanes x the
/// column's capacity x its entry bytes, rounded up to %unit.
constexpr const char *kRegion = R"(      %Xd = mul %X, %eight : i32
      %Xd6 = add %Xd, %six : i32
      %Xd7 = add %Xd, %seven : i32
      %Xd4 = add %Xd, %four : i32
      %Xceb = load %desc[%Xd6] : i64
      %Xfirst = load %desc[%Xd7] : i64
      %Xcol = load %desc[%Xd4] : i64
      %Xcol32 = cast %Xcol : i64 to i32
      %XAt = add GN, %Xcol32 : i32
      %Xcap = load %table[%XAt] : i64
      %Xrb = mul %Xcap, %Xceb : i64
      %Xrl = mul %Xrb, %lanes64 : i64
      ROUND %Xall = %Xrl
      %Xis = cmp ne %Xfirst, %zero64 : i64
      %Xregion = select %Xis, %Xall, %zero64 : i64)";

/// An exclusive scan in place on one thread (names prefixed %X): COUNT
/// elements of BUF from FIRST, from START; the sum of the COUNT elements
/// GAP after each at %Xall, the end of the scan at %Xrun.
constexpr const char *kScan = R"(    %Xrun = alloca i64
    %Xall = alloca i64
    store %Xrun, START
    store %Xall, %zero64
    for %Xh = 0 to COUNT {
      %Xi = add %Xh, FIRST : i32
      %Xb = load BUF[%Xi] : i64
      %Xr0 = load %Xrun : i64
      store BUF[%Xi], %Xr0
      %Xr1 = add %Xr0, %Xb : i64
      store %Xrun, %Xr1
      %Xj = add %Xi, GAP : i32
      %Xe = load BUF[%Xj] : i64
      %Xa0 = load %Xall : i64
      %Xa1 = add %Xa0, %Xe : i64
      store %Xall, %Xa1
    })";

/// The need of iteration %i of the stack with slot %slot32: the counting
/// kernel's layout (element slot * spread + (i & (spread - 1)) of a 1-D
/// `need`), or an optimistic launch's rows (element [slot, i - begin]).
constexpr const char *kSpreadNeed = R"(          %li = and %i, %mask : i32
          %at = add %sbase, %li : i32
          %v = load %need[%at] : i64)";
constexpr const char *kRowsNeed = R"(          %ci = sub %i, %begin : i32
          %v = load %need[%slot32, %ci] : i64)";

/// Writes values[r] to rows[first + r, j] for every column j: the
/// per-iteration capacities of a launch whose heap is not compacted.
constexpr const char *kFillKernel = R"(
kernel @adstack_fill_rows(%rows: ndarray<i64, 2>, %values: ndarray<i64, 1>, %first: i32,
                          %count: i32, %columns: i32) {
  parallel for %j = 0 to %columns {
    for %r = 0 to %count {
      %v = load %values[%r] : i64
      %row = add %first, %r : i32
      store %rows[%row, %j], %v
    }
  }
}
)";

/// `text` with every line `ROUND %out = %in` replaced by the lines that
/// round %in up to a multiple of %unit (%unitm1 is %unit - 1), into %out.
std::string expandRounds(std::string_view text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    size_t round = line.find("ROUND ");
    size_t eq = line.find(" = ");
    if (round == std::string_view::npos || eq == std::string_view::npos) {
      out.append(line);
    } else {
      std::string_view indent = line.substr(0, round);
      std::string result(line.substr(round + 6, eq - round - 6));
      std::string_view in = line.substr(eq + 3);
      out += fmt::format("{0}{1}u = add {2}, %unitm1 : i64\n{0}{1}d = div {1}u, %unit : i64\n"
                         "{0}{1} = mul {1}d, %unit : i64",
                         indent, result, in);
    }
    if (end < text.size())
      out += '\n';
    at = end + 1;
  }
  return out;
}

/// Zeroes the first `count` elements of `b`: the counting kernel's
/// per-iteration needs once the table kernel has read them.
constexpr const char *kZeroKernel = R"(
kernel @adstack_zero_needs(%b: ndarray<i64, 1>, %count: i32) {
  %zero = const 0 : i64
  parallel for %i = 0 to %count {
    store %b[%i], %zero
  }
}
)";

std::string replaced(std::string text, std::string_view marker, std::string_view with) {
  for (size_t at = 0; (at = text.find(marker, at)) != std::string::npos; at += with.size())
    text.replace(at, marker.size(), with);
  return text;
}

/// kScan with its names prefixed `prefix` over `buffer`.
std::string scan(std::string_view prefix, std::string_view buffer, std::string_view first,
                 std::string_view count, std::string_view gap, std::string_view start) {
  std::string text = replaced(kScan, "%X", "%" + std::string(prefix));
  for (auto [marker, with] :
       {std::pair{"BUF", buffer}, std::pair{"FIRST", first}, std::pair{"COUNT", count},
        std::pair{"GAP", gap}, std::pair{"START", start}})
    text = replaced(text, marker, with);
  return text;
}

/// The table kernel's candidates (docs/runtime.md, "Compacted heap"): in
/// a run with groups of 32, per group, the regions' bytes it would take as
/// groups of 1, 2, 4, 8, 16 and 32 threads (each sub-group of 2^k lanes at
/// its largest need, rounded up to the unit, as the regions are), at
/// table[cands + k * groups + g]; their sums per block at sums[10 + 2 *
/// blocks + k * blocks + b] and over the launch at sums[2 + k].
std::string candidates(std::string text) {
  std::string init, sub, lane, store, block, total;
  for (int k = 0; k < kGroupShifts; ++k) {
    int size = 1 << k;
    init += fmt::format("    %acc{0} = alloca i64\n    store %acc{0}, %zero64\n", k);
    sub += fmt::format("      %sub{0} = alloca i64\n      store %sub{0}, %zero64\n", k);
    lane += fmt::format(R"(        %yasm{0} = const {1} : i32
        %yase{0} = and %l1, %yasm{0} : i32
        %yasd{0} = cmp eq %yase{0}, %zero : i32
        %yaso{0} = load %sub{0} : i64
        %yasx{0} = max %yaso{0}, %gmine : i64
        %yasz{0} = const {2} : i64
        %yasb{0} = mul %yasx{0}, %eb : i64
        %yasc{0} = mul %yasb{0}, %yasz{0} : i64
        ROUND %yasr{0} = %yasc{0}
        %yasa{0} = select %yasd{0}, %yasr{0}, %zero64 : i64
        %yaao{0} = load %acc{0} : i64
        %yaan{0} = add %yaao{0}, %yasa{0} : i64
        store %acc{0}, %yaan{0}
        %yask{0} = select %yasd{0}, %zero64, %yasx{0} : i64
        store %sub{0}, %yask{0}
)",
                        k, size - 1, size);
    store += fmt::format(R"(      %yccg{0} = const {0} : i32
      %yccq{0} = mul %yccg{0}, %groups : i32
      %yccr{0} = add %cands, %yccq{0} : i32
      %ycct{0} = add %yccr{0}, %g : i32
      %yccv{0} = load %acc{0} : i64
      store %table[%ycct{0}], %yccv{0}
)",
                         k);
    block += fmt::format(R"(    %ybbk{0} = alloca i64
    store %ybbk{0}, %zero64
    %ybbg{0} = const {0} : i32
    %ybbq{0} = mul %ybbg{0}, %groups : i32
    %ybbr{0} = add %cands, %ybbq{0} : i32
    %ybbf{0} = add %ybbr{0}, %lo : i32
    for %ybbh{0} = 0 to %candCount {{
      %ybbi{0} = add %ybbf{0}, %ybbh{0} : i32
      %ybbv{0} = load %table[%ybbi{0}] : i64
      %ybbo{0} = load %ybbk{0} : i64
      %ybbn{0} = add %ybbo{0}, %ybbv{0} : i64
      store %ybbk{0}, %ybbn{0}
    }}
    %ybbw{0} = mul %ybbg{0}, %blocks : i32
    %ybbx{0} = add %bAt1, %blocks : i32
    %ybby{0} = add %ybbx{0}, %ybbw{0} : i32
    %ybbz{0} = load %ybbk{0} : i64
    store %sums[%ybby{0}], %ybbz{0}
)",
                         k);
    total += fmt::format(R"(    %ydtk{0} = alloca i64
    store %ydtk{0}, %zero64
    %ydtg{0} = const {0} : i32
    %ydtw{0} = mul %ydtg{0}, %blocks : i32
    %ydth{0} = add %head, %blocks : i32
    %ydti{0} = add %ydth{0}, %blocks : i32
    %ydtf{0} = add %ydti{0}, %ydtw{0} : i32
    for %ydtb{0} = 0 to %candBlocks {{
      %ydtj{0} = add %ydtf{0}, %ydtb{0} : i32
      %ydtv{0} = load %sums[%ydtj{0}] : i64
      %ydto{0} = load %ydtk{0} : i64
      %ydtn{0} = add %ydto{0}, %ydtv{0} : i64
      store %ydtk{0}, %ydtn{0}
    }}
    %ydtp{0} = add %ydtg{0}, %two : i32
    %ydtz{0} = load %ydtk{0} : i64
    store %sums[%ydtp{0}], %ydtz{0}
)",
                         k);
  }
  for (auto [marker, with] : {std::pair{"CAND_INIT", init}, std::pair{"SUB_INIT", sub},
                              std::pair{"CAND_LANE", lane}, std::pair{"CAND_STORE", store},
                              std::pair{"CAND_BLOCK", block}, std::pair{"CAND_TOTAL", total}})
    text = replaced(text, marker, with);
  return text;
}

/// The module of both table kernels and the fill kernel.
std::string moduleText() {
  // The groups' bytes in blocks, then the blocks' sums (docs/runtime.md,
  // "Compacted heap").
  std::string table =
      replaced(replaced(kTableKernel, "SCAN_BLOCK",
                        scan("b", "%table", "%blockFirst", "%inBlock", "%groups", "%zero64")),
               "SCAN_SUMS", scan("s", "%sums", "%head", "%blocks", "%blocks", "%base"));
  table = candidates(table);
  for (auto [marker, index, group] :
       {std::tuple{"REGION(r)", "r", "%gn"}, std::tuple{"REGION(u)", "u", "%qn"}})
    table = replaced(table, marker,
                     replaced(replaced(kRegion, "GN", group), "%X", "%" + std::string(index)));
  table = expandRounds(table);
  std::string spread = replaced(
      replaced(replaced(table, "NAME", "adstack_group_table"), "NEED_TYPE", "ndarray<i64, 1>"),
      "NEED_LOAD", kSpreadNeed);
  std::string rows = replaced(
      replaced(replaced(table, "NAME", "adstack_group_table_rows"), "NEED_TYPE", "ndarray<i64, 2>"),
      "NEED_LOAD", kRowsNeed);
  return spread + rows + kFillKernel + kZeroKernel;
}

absl::StatusOr<const Kernel *> moduleKernel(std::string_view name) {
  static const absl::StatusOr<std::unique_ptr<Module>> module =
      []() -> absl::StatusOr<std::unique_ptr<Module>> {
    absl::StatusOr<std::unique_ptr<Module>> m = parseModule(moduleText());
    if (!m.ok())
      return m.status();
    if (absl::Status s = verify(**m); !s.ok())
      return s;
    return m;
  }();
  if (!module.ok())
    return absl::InternalError("the compacted heap's table kernels do not parse: " +
                               std::string(module.status().message()));
  return (*module)->findKernel(name);
}

} // namespace

std::optional<GroupTableShape> groupTableShape(const LaunchPlan &plan,
                                               const MeasuredAdStackNeeds &needs,
                                               const AdStackIterationCapacities *capacities) {
  const KernelLayout &layout = plan.layout();
  GroupTableShape shape;
  shape.stacks = int64_t(layout.stacks.size());
  int task = -1;
  bool measured = false;
  for (size_t i = 0; i < layout.stacks.size(); ++i) {
    const KernelLayout::Stack &st = layout.stacks[i];
    bool inHeap = st.localEntries == 0;
    auto slot = needs.slots.find(st.stmt);
    bool perIteration = inHeap && slot != needs.slots.end();
    if (inHeap && (st.parallelTask < 0 || (task >= 0 && st.parallelTask != task)))
      return std::nullopt;
    if (inHeap)
      task = st.parallelTask;
    measured |= perIteration;
    int64_t capacityRow = -1;
    if (perIteration && capacities)
      if (auto row = capacities->slots.find(st.stmt); row != capacities->slots.end())
        capacityRow = capacities->firstRow + row->second;
    int64_t entryBytes = inHeap ? st.entryBytes : 0;
    // One column per stack (GroupTableShape::shareColumn merges them).
    shape.desc.insert(shape.desc.end(), {entryBytes, perIteration ? slot->second : -1,
                                         perIteration ? 1 : plan.heap().capacities[i], capacityRow,
                                         int64_t(i), 0, entryBytes, 1});
  }
  if (!measured)
    return std::nullopt;
  shape.columns = shape.stacks;
  const KernelLayout::Task &t = layout.tasks.at(task);
  std::optional<int64_t> begin = plan.taskBound(t.begin), end = plan.taskBound(t.end);
  if (!begin || !end || t.begin.kind == KernelLayout::TaskBound::FieldElement ||
      t.end.kind == KernelLayout::TaskBound::FieldElement || *end - *begin > needs.spread)
    return std::nullopt;
  // Rows are columns of the iterations counted from the task's begin.
  if (capacities && capacities->rows->shape().at(1) < *end - *begin)
    return std::nullopt;
  shape.begin = *begin;
  shape.end = *end;
  shape.rows = needs.rows;
  return shape;
}

GroupTableShape GroupTableShape::shareColumn(int64_t align) const {
  GroupTableShape shared = *this;
  // Stacks whose entries are whole multiples of `align` bytes first, so
  // that each of their entries starts at a multiple of it (their elements
  // may be that wide); the column's entry padded to it, so that every
  // level keeps that.
  auto aligned = [&](int64_t s) {
    int64_t bytes = desc[size_t(s * kDescElements)];
    return bytes > 0 && bytes % align == 0;
  };
  int64_t before = 0;
  bool anyAligned = false;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t s = 0; s < stacks; ++s)
      if (aligned(s) == (pass == 0)) {
        int64_t *d = &shared.desc[size_t(s * kDescElements)];
        d[4] = 0;
        d[5] = before;
        d[7] = s == 0;
        before += d[0];
        anyAligned |= pass == 0;
      }
  const int64_t entry = anyAligned ? (before + align - 1) / align * align : before;
  for (int64_t s = 0; s < stacks; ++s)
    shared.desc[size_t(s * kDescElements + 6)] = entry;
  shared.columns = 1;
  return shared;
}

int64_t groupTableHeader(int64_t stacks) {
  return 1 + 3 * stacks;
}

int64_t groupTableWords(int64_t groups, int64_t stacks, int64_t columns) {
  return groupTableHeader(stacks) + groups * columns + 1;
}

int64_t groupTableElements(int64_t groups, int64_t stacks, int64_t lanes) {
  return groups * stacks + 4 * groups +
         (lanes == abi::kAdStackGroupThreads ? kGroupShifts * groups : 0);
}

int64_t groupTableBlock(int64_t groups) {
  int64_t block = 32;
  while (block * block < groups)
    block *= 2;
  return block;
}

int64_t groupTableSums(int64_t groups, int64_t block) {
  return 4 + kGroupShifts + (4 + kGroupShifts) * ((groups + block - 1) / block);
}

absl::StatusOr<const Kernel *> groupTableKernel(bool rows) {
  return moduleKernel(rows ? "adstack_group_table_rows" : "adstack_group_table");
}

absl::StatusOr<const Kernel *> fillRowsKernel() {
  return moduleKernel("adstack_fill_rows");
}

absl::StatusOr<const Kernel *> zeroNeedsKernel() {
  return moduleKernel("adstack_zero_needs");
}

} // namespace qd::accel
