// DeepSeek-V3's expert routing (backend.BiasedRouter): sigmoid scores, a selection bias,
// group-limited choice.

// MOE_BIASED_MAX_GROUPS is the most expert groups moe_route_biased_f32 handles
// (cuda.MoEBiasedMaxGroups).
#define MOE_BIASED_MAX_GROUPS 64

// moe_sel is expert e's selection score: its sigmoid score plus its bias (when hasBias).
__device__ double moe_sel(const float* l, const float* bias, int hasBias, int e) {
    double s = 1.0 / (1.0 + exp(-(double)l[e]));
    return hasBias ? s + (double)bias[e] : s;
}

// moe_route_biased_f32: one thread a token t of n. Scores s = sigmoid(logit) in double
// precision (as the CPU backend computes them) and the selection scores s + bias; with
// groups > 1 the experts split into groups runs of experts/groups, each scored by the sum
// of its two best selection scores, and the groupsUsed best groups (lower index on ties)
// are kept. The k best kept experts by selection score, best first (lower index on ties),
// go into ids ([n][k]), their s into gains, divided by their sum when normalize is set.
extern "C" __global__ void moe_route_biased_f32(int* ids, float* gains, const float* logits, const float* bias, int hasBias,
                                                int n, int experts, int k, int groups, int groupsUsed, int normalize) {
    pdl_entry();
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float* l = logits + t * experts;
    int* id = ids + t * k;
    float* g = gains + t * k;
    unsigned long long kept = ~0ULL;  // the groups whose experts compete
    int per = experts / groups;
    if (groups > 1) {
        double gs[MOE_BIASED_MAX_GROUPS];
        for (int gr = 0; gr < groups; gr++) {
            double first = -1e300, second = -1e300;
            for (int e = gr * per; e < (gr + 1) * per; e++) {
                double v = moe_sel(l, bias, hasBias, e);
                if (v > first) {
                    second = first;
                    first = v;
                } else if (v > second) {
                    second = v;
                }
            }
            gs[gr] = first + second;
        }
        kept = 0;
        for (int j = 0; j < groupsUsed; j++) {
            int best = -1;
            for (int gr = 0; gr < groups; gr++) {
                if (!((kept >> gr) & 1ULL) && (best < 0 || gs[gr] > gs[best])) best = gr;
            }
            kept |= 1ULL << best;
        }
    }
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        double bv = 0.0;
        for (int e = 0; e < experts; e++) {
            if (groups > 1 && !((kept >> (e / per)) & 1ULL)) continue;
            bool taken = false;
            for (int i = 0; i < j; i++) taken = taken || id[i] == e;
            if (taken) continue;
            double v = moe_sel(l, bias, hasBias, e);
            if (best < 0 || v > bv) best = e, bv = v;
        }
        id[j] = best;
        double s = 1.0 / (1.0 + exp(-(double)l[best]));
        g[j] = (float)s;
        sum += s;
    }
    if (normalize) {
        for (int j = 0; j < k; j++) g[j] = (float)((double)g[j] / sum);
    }
}
