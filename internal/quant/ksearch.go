package quant

import "math"

// Scale searches used by the k-quant quantizers, in the spirit of GGML's make_qx_quants,
// make_q3_quants and make_qkx2_quants: start from the scale that maps the block's extreme
// value to the end of the integer range, then look for a nearby scale (and min) that lowers
// the weighted squared error of the whole block. All arithmetic is float32, as in GGML.

// groupMaxEps is the magnitude below which a group is treated as all zeros.
const groupMaxEps = 1e-15

// makeQXQuants quantizes x to signed integers in [-nmax, nmax-1] (stored in L biased by nmax)
// and returns the scale. Errors are weighted by x^2, so large values are fitted best; 19
// candidate scales around nmax/max are tried and the least-squares scale of the best one kept.
func makeQXQuants(x []float32, nmax int, L []uint8) float32 {
	mx, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	fmax := float32(nmax)
	quant := func(iscale, v float32) int {
		return clampInt(nearestInt(iscale*v), -nmax, nmax-1)
	}
	iscale := -fmax / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := quant(iscale, v)
		L[i] = uint8(l + nmax)
		w := v * v
		sumlx += w * v * float32(l)
		suml2 += w * float32(l*l)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + 0.1*float32(is)) / mx
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := quant(iscale, v)
			w := v * v
			sumlx += w * v * float32(l)
			suml2 += w * float32(l*l)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			for i, v := range x {
				L[i] = uint8(quant(iscale, v) + nmax)
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants quantizes x to signed integers in [-nmax, nmax-1] (stored in L biased by nmax)
// and returns the scale. Starting from the scale nmax/max, it moves single elements to the
// level that best fits the least-squares scale of the others (errors weighted by x^2) while
// that lowers the total error, for at most five passes.
func makeQ3Quants(x []float32, nmax int, L []uint8) float32 {
	mx, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	var ls [32]int
	li := ls[:len(x)]
	iscale := -float32(nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		li[i] = l
		w := v * v
		sumlx += w * v * float32(l)
		suml2 += w * float32(l*l)
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := v * v
			slx := sumlx - w*v*float32(li[i])
			if slx <= 0 {
				continue
			}
			sl2 := suml2 - w*float32(li[i]*li[i])
			nl := clampInt(nearestInt(v*sl2/slx), -nmax, nmax-1)
			if nl == li[i] {
				continue
			}
			slx += w * v * float32(nl)
			sl2 += w * float32(nl*nl)
			if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 {
				li[i] = nl
				sumlx, suml2 = slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i, l := range li {
		L[i] = uint8(l + nmax)
	}
	if suml2 == 0 {
		return 0
	}
	return sumlx / suml2
}

// qkx2Params tunes makeQKX2Quants: candidate inverse scales are (nmax + rmin + rdelta*k) /
// (max - min) for k = 0..nstep; useMAD weights absolute instead of squared errors.
type qkx2Params struct {
	rmin, rdelta float32
	nstep        int
	useMAD       bool
}

// makeQKX2Quants quantizes x to unsigned integers in [0, nmax] for the "type-1" form
// x ~ scale*L - theMin (theMin >= 0) and returns scale and theMin. weights[i] weighs element
// i's error. For each candidate scale it solves the weighted least-squares problem for scale
// and min and keeps the best fit. laux is scratch space of len(x).
func makeQKX2Quants(x, weights []float32, nmax int, L, laux []uint8, p qkx2Params) (scale, theMin float32) {
	lo, hi := x[0], x[0]
	var sumW, sumX float32
	for i, v := range x {
		lo = min(lo, v)
		hi = max(hi, v)
		sumW += weights[i]
		sumX += weights[i] * v
	}
	lo = min(lo, 0)
	if hi == lo || lo != lo || hi != hi {
		clear(L[:len(x)])
		return 0, -lo
	}
	fmax := float32(nmax)
	errOf := func(diff float32) float32 {
		if p.useMAD {
			return float32(math.Abs(float64(diff)))
		}
		return diff * diff
	}
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	var bestErr float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*(v-lo)), 0, nmax)
		L[i] = uint8(l)
		bestErr += weights[i] * errOf(scale*float32(l)+lo-v)
	}
	for k := 0; k <= p.nstep; k++ {
		iscale = (p.rmin + p.rdelta*float32(k) + fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := clampInt(nearestInt(iscale*(v-lo)), 0, nmax)
			laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += w * fl
			sumL2 += w * fl * fl
			sumXL += w * fl * v
		}
		det := sumW*sumL2 - sumL*sumL
		if det <= 0 {
			continue
		}
		thisScale := (sumW*sumXL - sumX*sumL) / det
		thisMin := (sumL2*sumX - sumL*sumXL) / det
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var curErr float32
		for i, v := range x {
			curErr += weights[i] * errOf(thisScale*float32(laux[i])+thisMin-v)
		}
		if curErr < bestErr {
			copy(L[:len(x)], laux[:len(x)])
			bestErr = curErr
			scale, lo = thisScale, thisMin
		}
	}
	return scale, -lo
}
