// The host check of the quantized KV cache kernels (scripts/kvq_host_check.sh): random codes
// and scales in kvquant's layout, the kernels run through emu.h, and a float64 reference of
// the same attention (decode split-K with the splits merged as attn_combine merges them,
// varlen prefill with windows and soft-capping) and of the store's codes and scales.
#include "prog.h"
#include <random>
static std::mt19937 rng(42);
static float urand(float a) { return std::uniform_real_distribution<float>(-a, a)(rng); }

template <int C> unsigned char randCode() {
    for (;;) {
        unsigned b = rng() & 0xff;
        if (C == 1 && (b & 0x7f) == 0x7f) continue;
        if (C == 2 && (b & 0x7c) == 0x7c) continue;
        return (unsigned char)b;
    }
}

struct Cache { int nb, bs, kvh, hd, group; std::vector<unsigned char> kc, vc; std::vector<float> ks, vs; };

template <int C> Cache makeCache(int nb, int bs, int kvh, int hd) {
    Cache c{nb, bs, kvh, hd, hd % 32 == 0 ? 32 : hd};
    size_t n = (size_t)nb * bs * kvh * hd;
    c.kc.resize(n); c.vc.resize(n); c.ks.resize(n / c.group); c.vs.resize(n / c.group);
    for (size_t i = 0; i < n; i++) { c.kc[i] = randCode<C>(); c.vc[i] = randCode<C>(); }
    float qm = kvq_qmax<C>();
    for (size_t i = 0; i < c.ks.size(); i++) { c.ks[i] = (0.5f + std::fabs(urand(2))) / qm * 3; c.vs[i] = (0.5f + std::fabs(urand(2))) / qm * 3; }
    return c;
}
template <int C> double kval(const Cache& c, bool v, long long row, int d) {
    long long i = row * c.hd + d;
    return (double)kvq_value<C>(v ? c.vc[i] : c.kc[i]) * (double)(v ? c.vs[i / c.group] : c.ks[i / c.group]);
}

struct Seq { int q, ctx; };

// reference attention, double
template <int C> std::vector<double> refAttn(const Cache& c, const std::vector<float>& q, const std::vector<Seq>& seqs,
    const std::vector<int>& bt, int maxBlocks, int heads, float scale, int window, float softcap) {
    int hd = c.hd, G = heads / c.kvh;
    int T = 0; for (auto& s : seqs) T += s.q;
    std::vector<double> out((size_t)T * heads * hd);
    int t0 = 0;
    for (size_t si = 0; si < seqs.size(); si++) {
        auto s = seqs[si];
        for (int i = 0; i < s.q; i++) {
            int cpos = s.ctx - s.q + i, lo = window > 0 ? std::max(0, cpos - window + 1) : 0;
            for (int h = 0; h < heads; h++) {
                int kvh = h / G;
                std::vector<double> sc;
                double mx = -1e300;
                for (int p = lo; p <= cpos; p++) {
                    long long row = ((long long)bt[si * maxBlocks + p / c.bs] * c.bs + p % c.bs) * c.kvh + kvh;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)q[((size_t)(t0 + i) * heads + h) * hd + e] * kval<C>(c, false, row, e);
                    d *= scale;
                    if (softcap > 0) d = softcap * std::tanh(d / softcap);
                    sc.push_back(d); mx = std::max(mx, d);
                }
                double L = 0; for (auto& x : sc) { x = std::exp(x - mx); L += x; }
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int p = lo; p <= cpos; p++) {
                        long long row = ((long long)bt[si * maxBlocks + p / c.bs] * c.bs + p % c.bs) * c.kvh + kvh;
                        o += sc[p - lo] * kval<C>(c, true, row, e);
                    }
                    out[((size_t)(t0 + i) * heads + h) * hd + e] = o / L;
                }
            }
        }
        t0 += s.q;
    }
    return out;
}

static double relerr(const std::vector<float>& g, const std::vector<double>& w) {
    double n = 0, d = 0;
    for (size_t i = 0; i < w.size(); i++) { double e = g[i] - w[i]; if (g[i] != g[i]) return 1e9; n += e * e; d += w[i] * w[i]; }
    return std::sqrt(n / d);
}

static int fails = 0;

template <int C, int HD, int G> void testDecode(int splitLen) {
    const int bs = 16, kvh = 2, heads = kvh * G, nb = 64;
    Cache c = makeCache<C>(nb, bs, kvh, HD);
    std::vector<Seq> seqs = {{1, 700}, {1, 33}, {1, 1}};
    int maxBlocks = 44;
    std::vector<int> bt(seqs.size() * maxBlocks, 0), ctx;
    for (size_t s = 0; s < seqs.size(); s++) { for (int j = 0; j < (seqs[s].ctx + bs - 1) / bs; j++) bt[s * maxBlocks + j] = (int)((s * 17 + j * 7) % nb); ctx.push_back(seqs[s].ctx); }
    std::vector<float> q(seqs.size() * heads * HD); for (auto& x : q) x = urand(1.5);
    float scale = 1.f / std::sqrt((float)HD);
    int maxCtx = 700, splits = (maxCtx + splitLen - 1) / splitLen;
    std::vector<float> out(q.size(), NAN), pm(seqs.size() * heads * splits), pl(pm.size()), po(pm.size() * HD);
    launch({(unsigned)splits, (unsigned)kvh, (unsigned)seqs.size()}, 128, [&] {
        attn_decode_grpq<C, HD, G>(out.data(), heads * HD, 0, q.data(), heads * HD, c.kc.data(), c.vc.data(), c.ks.data(), c.vs.data(),
            bt.data(), maxBlocks, ctx.data(), pm.data(), pl.data(), po.data(), heads, kvh, bs, splitLen, scale);
    });
    if (splits > 1) { // attn_combine on the host
        for (size_t s = 0; s < seqs.size(); s++) for (int h = 0; h < heads; h++) {
            size_t r0 = (s * heads + h) * splits; float M = -INFINITY;
            for (int i = 0; i < splits; i++) M = std::max(M, pm[r0 + i]);
            float L = 0; for (int i = 0; i < splits; i++) if (pm[r0 + i] != -INFINITY) L += pl[r0 + i] * std::exp(pm[r0 + i] - M);
            for (int d = 0; d < HD; d++) { float v = 0; for (int i = 0; i < splits; i++) if (pm[r0 + i] != -INFINITY) v += po[(r0 + i) * HD + d] * std::exp(pm[r0 + i] - M); out[(s * heads + h) * HD + d] = v / L; }
        }
    }
    auto want = refAttn<C>(c, q, seqs, bt, maxBlocks, heads, scale, 0, 0);
    double e = relerr(out, want);
    printf("decode C=%d HD=%d G=%d splits=%d: rel err %.2e\n", C, HD, G, splits, e);
    if (!(e < 1e-5)) fails++;
}

template <int C> void testPrefill(int heads, int kvh, int hd, int window, float softcap) {
    const int bs = 16, nb = 64;
    Cache c = makeCache<C>(nb, bs, kvh, hd);
    std::vector<Seq> seqs = {{37, 37}, {20, 300}, {1, 50}};
    int maxBlocks = 19;
    std::vector<int> bt(seqs.size() * maxBlocks, 0), ctx, starts = {0};
    for (size_t s = 0; s < seqs.size(); s++) { for (int j = 0; j < (seqs[s].ctx + bs - 1) / bs; j++) bt[s * maxBlocks + j] = (int)((s * 13 + j * 5) % nb); ctx.push_back(seqs[s].ctx); starts.push_back(starts.back() + seqs[s].q); }
    int T = starts.back();
    std::vector<float> q((size_t)T * heads * hd); for (auto& x : q) x = urand(1.5);
    float scale = 1.f / std::sqrt((float)hd);
    std::vector<float> out(q.size(), NAN);
    launch({3, (unsigned)heads, (unsigned)seqs.size()}, 128, [&] {
        attn_prefillq<C>(out.data(), heads * hd, 0, q.data(), heads * hd, c.kc.data(), c.vc.data(), c.ks.data(), c.vs.data(), bt.data(), maxBlocks,
            starts.data(), ctx.data(), heads, kvh, hd, c.group, bs, scale, window, softcap);
    });
    auto want = refAttn<C>(c, q, seqs, bt, maxBlocks, heads, scale, window, softcap);
    double e = relerr(out, want);
    printf("prefill C=%d heads %d/%d hd %d window %d softcap %g: rel err %.2e\n", C, heads, kvh, hd, window, softcap, e);
    if (!(e < 1e-5)) fails++;
}

template <int C> void testStore(int heads, int kvh, int hd, int ropeDim, int neox) {
    const int n = 5, bs = 16, nb = 2;
    int group = hd % 32 == 0 ? 32 : hd;
    std::vector<float> q(n * heads * hd), k(n * kvh * hd), v(n * kvh * hd);
    for (auto& x : q) x = urand(2); for (auto& x : k) x = urand(2); for (auto& x : v) x = urand(2);
    for (int i = 0; i < group; i++) k[2 * kvh * hd + i] = 0;  // zero group
    k[3 * kvh * hd + 1] = 50;                                     // outlier
    std::vector<int> slots = {3, 17, 0, -1, 30}, pos = {0, 5, 100, 7, 2000};
    std::vector<float> inv(ropeDim / 2); for (int i = 0; i < ropeDim / 2; i++) inv[i] = std::pow(10000.f, -2.f * i / ropeDim);
    size_t N = (size_t)nb * bs * kvh * hd;
    std::vector<unsigned char> kc(N), vc(N); std::vector<float> ks(N / group), vs(N / group);
    std::vector<float> q2 = q;
    launch({n, (unsigned)(heads + kvh), 1}, 64, [&] {
        rope_kvq<C>(q.data(), k.data(), v.data(), heads * hd, kvh * hd, kvh * hd, kc.data(), vc.data(), ks.data(), vs.data(), slots.data(), pos.data(), inv.data(), 1.f, heads, kvh, hd, ropeDim, neox, group);
    });
    int bad = 0;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < heads + kvh; h++) {
            bool isQ = h < heads; int hh = isQ ? h : h - heads;
            std::vector<float> r(hd);
            const float* src = isQ ? &q2[(t * heads + hh) * hd] : &k[(t * kvh + hh) * hd];
            for (int d = 0; d < hd; d++) r[d] = src[d];
            for (int i = 0; i < ropeDim / 2; i++) {
                float s, cc; sincosf((float)pos[t] * inv[i], &s, &cc);
                int a = neox ? i : 2 * i, b = neox ? i + ropeDim / 2 : 2 * i + 1;
                float x = src[a], y = src[b]; r[a] = x * cc - y * s; r[b] = x * s + y * cc;
            }
            if (isQ) { for (int d = 0; d < hd; d++) if (r[d] != q[(t * heads + hh) * hd + d]) bad++; continue; }
            if (slots[t] < 0) continue;
            long long row = (long long)slots[t] * kvh + hh;
            for (int pass = 0; pass < 2; pass++) {
                const float* x = pass == 0 ? r.data() : &v[(t * kvh + hh) * hd];
                for (int g = 0; g < hd / group; g++) {
                    float amax = 0; for (int i = 0; i < group; i++) amax = std::max(amax, std::fabs(x[g * group + i]));
                    float sc = amax / kvq_qmax<C>();
                    float got = pass == 0 ? ks[row * (hd / group) + g] : vs[row * (hd / group) + g];
                    if (__float_as_uint(got) != __float_as_uint(sc)) bad++;
                    for (int i = 0; i < group; i++) {
                        unsigned want = sc == 0 ? 0 : kvq_code<C>(x[g * group + i] / sc);
                        unsigned gc = pass == 0 ? kc[row * hd + g * group + i] : vc[row * hd + g * group + i];
                        if (want != gc) bad++;
                    }
                }
            }
        }
    }
    // the skipped token's slot stays zero; so do unwritten slots
    for (int d = 0; d < kvh * hd; d++) if (kc[1 * kvh * hd + d] || vc[1 * kvh * hd + d]) bad++;
    printf("store C=%d heads %d/%d hd %d rope %d neox %d: %d mismatches\n", C, heads, kvh, hd, ropeDim, neox, bad);
    if (bad) fails++;
}

// fp8Value is the value of an FP8 code by the format's definition (m mantissa bits, bias).
static double fp8Value(unsigned b, int m, int bias) {
    int e = (b >> m) & ((1 << (7 - m)) - 1), man = b & ((1 << m) - 1);
    double v = e == 0 ? std::ldexp((double)man, 1 - bias - m) : std::ldexp((double)((1 << m) + man), e - bias - m);
    return (b & 0x80) ? -v : v;
}

// testCodec checks kvq_value against the formats' definitions on every code, and kvq_code
// against an exhaustive search for the nearest code (ties to the even code) on random
// values and every midpoint.
template <int C> void testCodec() {
    int bad = 0;
    auto valid = [](unsigned b) { return C == 0 || (C == 1 ? (b & 0x7f) != 0x7f : (b & 0x7c) != 0x7c); };
    auto def = [](unsigned b) { return C == 0 ? (double)(signed char)b : C == 1 ? fp8Value(b, 3, 7) : fp8Value(b, 2, 15); };
    std::vector<float> ys;
    for (unsigned b = 0; b < 256; b++) {
        if (!valid(b)) continue;
        if ((double)kvq_value<C>(b) != def(b) || std::signbit(kvq_value<C>(b)) != std::signbit(def(b))) bad++;
        for (unsigned b2 = 0; b2 < 256; b2++)
            if (valid(b2) && (b2 & 0x80) == (b & 0x80) && std::fabs(def(b2)) > std::fabs(def(b))) {
                ys.push_back((float)((def(b) + def(b2)) / 2));
                break;
            }
    }
    float qm = kvq_qmax<C>();
    for (int i = 0; i < 100000; i++) ys.push_back(urand(qm * 1.01f) * (i % 3 == 0 ? 0.01f : 1.f));
    for (float y : ys) {
        unsigned best = 0;
        double bd = 1e300;
        for (unsigned b = 0; b < 256; b++) {
            if (!valid(b) || (C == 0 && b == 0x80)) continue;  // int8 codes are clamped to ±127
            double d = std::fabs(def(b) - (double)y);
            if (d < bd || (d == bd && ((b & 1) == 0 || (C == 0 && ((int)(signed char)b & 1) == 0)))) { bd = d; best = b; }
        }
        unsigned got = kvq_code<C>(y);
        if (got != best && def(got) != def(best)) bad++;  // +0 and -0 are one value
    }
    printf("codec C=%d: %d of %zu values off the definition\n", C, bad, ys.size() + 256);
    if (bad) fails++;
}

int main() {
    testCodec<0>(); testCodec<1>(); testCodec<2>();
    testStore<0>(4, 2, 64, 64, 0); testStore<1>(4, 2, 64, 32, 1); testStore<2>(3, 1, 40, 40, 0); testStore<1>(8, 2, 128, 128, 0);
    testDecode<0, 128, 4>(96); testDecode<1, 128, 4>(96); testDecode<2, 128, 4>(96); testDecode<1, 128, 4>(704);
    testDecode<1, 64, 8>(64); testDecode<0, 64, 1>(128); testDecode<2, 128, 2>(32); testDecode<1, 64, 2>(704);
    testPrefill<1>(4, 2, 128, 0, 0); testPrefill<0>(6, 2, 64, 64, 0); testPrefill<2>(3, 1, 40, 0, 30); testPrefill<1>(4, 2, 96, 100, 20);
    printf("%d failures\n", fails);
    return fails != 0;
}
