package cuda

import "fmt"

// MoEBiasedMaxGroups is the most expert groups MoERouteBiased handles.
const MoEBiasedMaxGroups = 64

// MoERouteBiased picks each of n tokens' k (at most MoERouteMaxK) experts from its router
// logits (F32 [n][experts], at most MoEMaxExperts) as DeepSeek-V3 does (one thread a token,
// in float64): sigmoid scores s, chosen on s + bias (F32 [experts]; hasBias false: none,
// bias unread), among the groupsUsed best of groups groups (each scored by its two best
// s + bias; groups <= 1: all experts), best first, the lower index on ties, into ids (I32
// [n][k]) with their s into gains (F32 [n][k]), divided by their sum when normalize is set.
func (o *Ops) MoERouteBiased(ids, gains, logits, bias Buffer, hasBias bool, n, experts, k, groups, groupsUsed int, normalize bool) error {
	if groups <= 1 {
		groups, groupsUsed = 1, 1
	}
	if n <= 0 || experts <= 0 || experts > MoEMaxExperts || k <= 0 || k > min(experts, MoERouteMaxK) ||
		groups > MoEBiasedMaxGroups || experts%groups != 0 || (groups > 1 && experts/groups < 2) ||
		groupsUsed < 1 || groupsUsed > groups || groupsUsed*(experts/groups) < k {
		return fmt.Errorf("cuda route experts biased: bad shape n=%d experts=%d k=%d groups=%d used=%d (at most %d experts, %d a token, %d groups of at least 2)",
			n, experts, k, groups, groupsUsed, MoEMaxExperts, MoERouteMaxK, MoEBiasedMaxGroups)
	}
	if err := firstErr(need("route experts biased", "ids", ids, n*k, I32), need("route experts biased", "gains", gains, n*k, F32),
		need("route experts biased", "logits", logits, n*experts, F32)); err != nil {
		return err
	}
	b, flag := logits, 0
	if hasBias {
		if err := need("route experts biased", "bias", bias, experts, F32); err != nil {
			return err
		}
		b, flag = bias, 1
	}
	norm := 0
	if normalize {
		norm = 1
	}
	return o.Dev.Launch(o.Kern.mod, "moe_route_biased_f32", Dim3{(n + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0,
		ids, gains, logits, b, flag, n, experts, k, groups, groupsUsed, norm)
}
