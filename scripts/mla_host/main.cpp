// Host check of attn_mla (internal/backend/cuda/kernels/attention_mla.cu), run by
// scripts/mla_host_check.sh: the kernel on emulated blocks (emu.h) against a float64
// reference, for F32 and BF16 caches, prefill chunks over cached prefixes, decode and
// verification, one split and several (the partial results merged here as attn_combine
// merges them), and head groups of 16 and fewer.
#include "prog.h"
#include <random>

struct Case {
    int heads, hd;
    std::vector<int> qlens, ctxs;
    bool bf16;
    int splits, splitLen;
};

static unsigned short bf16_bits(float v) {
    unsigned u;
    memcpy(&u, &v, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

static int run(const Case& c, std::mt19937& rng) {
    const int bs = 16;
    int seqs = c.ctxs.size(), maxCtx = 0, maxQ = 0, tokens = 0;
    for (int s = 0; s < seqs; s++) {
        maxCtx = std::max(maxCtx, c.ctxs[s]);
        maxQ = std::max(maxQ, c.qlens[s]);
        tokens += c.qlens[s];
    }
    int maxBlocks = (maxCtx + bs - 1) / bs, numBlocks = seqs * maxBlocks + 1;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> kf((size_t)numBlocks * bs * c.hd);
    std::vector<bf16> kb(kf.size());
    for (size_t i = 0; i < kf.size(); i++) {
        kf[i] = u(rng);
        if (c.bf16) {
            kb[i].x = bf16_bits(kf[i]);
            kf[i] = to_f32(kb[i]);
        }
    }
    std::vector<int> perm(numBlocks);
    for (int i = 0; i < numBlocks; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int> bt(seqs * maxBlocks), starts(seqs + 1, 0), ctx(seqs);
    for (int i = 0; i < seqs * maxBlocks; i++) bt[i] = perm[i];
    for (int s = 0; s < seqs; s++) {
        starts[s + 1] = starts[s] + c.qlens[s];
        ctx[s] = c.ctxs[s];
    }
    std::vector<float> q((size_t)tokens * c.heads * c.hd);
    for (auto& v : q) v = 2 * u(rng);
    float scale = 0.07f;
    int group = c.heads, hg = 16;
    while (group % hg) hg /= 2;
    int tq = 16 / hg, chunks = (maxQ + tq - 1) / tq;
    std::vector<float> out(q.size(), NAN), pm((size_t)tokens * c.heads * c.splits, NAN), pl(pm.size(), NAN),
        po(pm.size() * c.hd, 0.f);
    launch({(unsigned)(c.heads / hg * chunks), (unsigned)c.splits, (unsigned)seqs}, 256, [&] {
        if (c.bf16)
            attn_mla<bf16>(out.data(), c.heads * c.hd, 0, q.data(), c.heads * c.hd, kb.data(), bt.data(), maxBlocks,
                           starts.data(), ctx.data(), pm.data(), pl.data(), po.data(), c.heads, 1, c.hd, bs, c.splitLen,
                           scale, hg, chunks);
        else
            attn_mla<float>(out.data(), c.heads * c.hd, 0, q.data(), c.heads * c.hd, kf.data(), bt.data(), maxBlocks,
                            starts.data(), ctx.data(), pm.data(), pl.data(), po.data(), c.heads, 1, c.hd, bs, c.splitLen,
                            scale, hg, chunks);
    });
    if (c.splits > 1) {  // attn_combine's merge
        for (int t = 0; t < tokens; t++)
            for (int h = 0; h < c.heads; h++) {
                size_t r0 = ((size_t)t * c.heads + h) * c.splits;
                float M = -INFINITY, L = 0;
                for (int i = 0; i < c.splits; i++) M = std::max(M, pm[r0 + i]);
                for (int i = 0; i < c.splits; i++)
                    if (pm[r0 + i] != -INFINITY) L += pl[r0 + i] * expf(pm[r0 + i] - M);
                for (int d = 0; d < c.hd; d++) {
                    float v = 0;
                    for (int i = 0; i < c.splits; i++)
                        if (pm[r0 + i] != -INFINITY) v += po[(r0 + i) * c.hd + d] * expf(pm[r0 + i] - M);
                    out[((size_t)t * c.heads + h) * c.hd + d] = v / L;
                }
            }
    }
    double num = 0, den = 0;
    for (int s = 0; s < seqs; s++)
        for (int i = 0; i < c.qlens[s]; i++) {
            int t = starts[s] + i, n = c.ctxs[s] - c.qlens[s] + i + 1;
            for (int h = 0; h < c.heads; h++) {
                const float* qh = &q[((size_t)t * c.heads + h) * c.hd];
                std::vector<double> sc(n), o(c.hd, 0.0);
                double m = -INFINITY, l = 0;
                for (int p = 0; p < n; p++) {
                    const float* k = &kf[((size_t)bt[s * maxBlocks + p / bs] * bs + p % bs) * c.hd];
                    double d = 0;
                    for (int j = 0; j < c.hd; j++) d += (double)qh[j] * k[j];
                    sc[p] = d * scale;
                    m = std::max(m, sc[p]);
                }
                for (int p = 0; p < n; p++) {
                    const float* k = &kf[((size_t)bt[s * maxBlocks + p / bs] * bs + p % bs) * c.hd];
                    double w = exp(sc[p] - m);
                    l += w;
                    for (int j = 0; j < c.hd; j++) o[j] += w * k[j];
                }
                for (int j = 0; j < c.hd; j++) {
                    double g = out[((size_t)t * c.heads + h) * c.hd + j], w = o[j] / l;
                    if (std::isnan(g)) g = 1e30;
                    num += (g - w) * (g - w);
                    den += w * w;
                }
            }
        }
    double err = sqrt(num / den);
    bool ok = err <= 2e-5;
    printf("attn_mla heads=%d hd=%d seqs=%d tokens=%d maxCtx=%d %s splits=%d: rel. error %.2e %s\n", c.heads, c.hd, seqs,
           tokens, maxCtx, c.bf16 ? "bf16" : "f32", c.splits, err, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

int main() {
    std::mt19937 rng(576);
    std::vector<Case> cases = {
        {16, 576, {1}, {300}, false, 1, 320},
        {16, 576, {1, 1}, {100, 37}, true, 3, 64},
        {16, 576, {9, 3}, {40, 100}, false, 1, 128},
        {16, 576, {5}, {130}, true, 4, 64},
        {32, 576, {2}, {50}, false, 2, 32},
        {4, 576, {7, 2}, {20, 2}, false, 1, 32},
        {24, 320, {3}, {70}, true, 3, 32},
    };
    int fails = 0;
    for (auto& c : cases) fails += run(c, rng);
    if (fails) {
        printf("%d of %zu cases failed\n", fails, cases.size());
        return 1;
    }
    printf("all %zu cases ok\n", cases.size());
    return 0;
}
