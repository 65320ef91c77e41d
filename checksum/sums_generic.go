package checksum

import "encoding/binary"

// partialAB is acc for bytes p that start at byte q of a piece of width w.
func partialAB(p []byte, q, w int) (A, B uint64) {
	var j uint64
	for len(p) > 0 {
		if q == 0 && len(p) >= w {
			whole := len(p) - len(p)%w
			var a, b uint64
			switch w {
			case 8:
				a, b = sumAB(p[:whole])
			case 4:
				a, b = sumAB32(p[:whole])
			default:
				a, b = sumAB16(p[:whole])
			}
			A += a
			B += j*a + b
			j += uint64(whole / w)
			p = p[whole:]
			continue
		}
		c := min(len(p), w-q)
		var x uint64
		for i := c - 1; i >= 0; i-- {
			x = x<<8 | uint64(p[i])
		}
		x <<= 8 * uint(q)
		A += x
		B += j * x
		p = p[c:]
		q += c
		if q == w {
			q = 0
			j++
		}
	}
	return A, B
}

// sumAB returns A = sum_k x_k and B = sum_k k*x_k over the little-endian
// 8-byte pieces of p (len(p) a multiple of 8), so that a run starting at
// piece index j0 weighs sum_k x_k*(2*(j0+k)+1) = (2*j0+1)*A + 2*B. Its loop
// uses additions only (a += x; b += a) on four independent lanes, unrolled
// four times.
func sumAB(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+128 <= len(p); i += 128 {
		q := (*[128]byte)(p[i : i+128])
		a0 += binary.LittleEndian.Uint64(q[0:8])
		a1 += binary.LittleEndian.Uint64(q[8:16])
		a2 += binary.LittleEndian.Uint64(q[16:24])
		a3 += binary.LittleEndian.Uint64(q[24:32])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[32:40])
		a1 += binary.LittleEndian.Uint64(q[40:48])
		a2 += binary.LittleEndian.Uint64(q[48:56])
		a3 += binary.LittleEndian.Uint64(q[56:64])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[64:72])
		a1 += binary.LittleEndian.Uint64(q[72:80])
		a2 += binary.LittleEndian.Uint64(q[80:88])
		a3 += binary.LittleEndian.Uint64(q[88:96])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[96:104])
		a1 += binary.LittleEndian.Uint64(q[104:112])
		a2 += binary.LittleEndian.Uint64(q[112:120])
		a3 += binary.LittleEndian.Uint64(q[120:128])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+32 <= len(p); i += 32 {
		q := (*[32]byte)(p[i : i+32])
		a0 += binary.LittleEndian.Uint64(q[0:8])
		a1 += binary.LittleEndian.Uint64(q[8:16])
		a2 += binary.LittleEndian.Uint64(q[16:24])
		a3 += binary.LittleEndian.Uint64(q[24:32])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 32)
	// Lane l holds x_{4i+l}, i < m: a_l = sum x, b_l = sum (m-i)*x, so
	// sum_i (4i+l)*x_{4i+l} = 4*(m*a_l - b_l) + l*a_l.
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		A += x
		B += k * x
		k++
	}
	return A, B
}

// sumAB32 is sumAB for 4-byte pieces, zero-extended.
func sumAB32(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+64 <= len(p); i += 64 {
		q := (*[64]byte)(p[i : i+64])
		a0 += uint64(binary.LittleEndian.Uint32(q[0:4]))
		a1 += uint64(binary.LittleEndian.Uint32(q[4:8]))
		a2 += uint64(binary.LittleEndian.Uint32(q[8:12]))
		a3 += uint64(binary.LittleEndian.Uint32(q[12:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[16:20]))
		a1 += uint64(binary.LittleEndian.Uint32(q[20:24]))
		a2 += uint64(binary.LittleEndian.Uint32(q[24:28]))
		a3 += uint64(binary.LittleEndian.Uint32(q[28:32]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[32:36]))
		a1 += uint64(binary.LittleEndian.Uint32(q[36:40]))
		a2 += uint64(binary.LittleEndian.Uint32(q[40:44]))
		a3 += uint64(binary.LittleEndian.Uint32(q[44:48]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[48:52]))
		a1 += uint64(binary.LittleEndian.Uint32(q[52:56]))
		a2 += uint64(binary.LittleEndian.Uint32(q[56:60]))
		a3 += uint64(binary.LittleEndian.Uint32(q[60:64]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+16 <= len(p); i += 16 {
		q := (*[16]byte)(p[i : i+16])
		a0 += uint64(binary.LittleEndian.Uint32(q[0:4]))
		a1 += uint64(binary.LittleEndian.Uint32(q[4:8]))
		a2 += uint64(binary.LittleEndian.Uint32(q[8:12]))
		a3 += uint64(binary.LittleEndian.Uint32(q[12:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 16)
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+4 <= len(p); i += 4 {
		x := uint64(binary.LittleEndian.Uint32(p[i:]))
		A += x
		B += k * x
		k++
	}
	return A, B
}

// sumAB16 is sumAB for 2-byte pieces, zero-extended.
func sumAB16(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := (*[32]byte)(p[i : i+32])
		a0 += uint64(binary.LittleEndian.Uint16(q[0:2]))
		a1 += uint64(binary.LittleEndian.Uint16(q[2:4]))
		a2 += uint64(binary.LittleEndian.Uint16(q[4:6]))
		a3 += uint64(binary.LittleEndian.Uint16(q[6:8]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[8:10]))
		a1 += uint64(binary.LittleEndian.Uint16(q[10:12]))
		a2 += uint64(binary.LittleEndian.Uint16(q[12:14]))
		a3 += uint64(binary.LittleEndian.Uint16(q[14:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[16:18]))
		a1 += uint64(binary.LittleEndian.Uint16(q[18:20]))
		a2 += uint64(binary.LittleEndian.Uint16(q[20:22]))
		a3 += uint64(binary.LittleEndian.Uint16(q[22:24]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[24:26]))
		a1 += uint64(binary.LittleEndian.Uint16(q[26:28]))
		a2 += uint64(binary.LittleEndian.Uint16(q[28:30]))
		a3 += uint64(binary.LittleEndian.Uint16(q[30:32]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+8 <= len(p); i += 8 {
		q := (*[8]byte)(p[i : i+8])
		a0 += uint64(binary.LittleEndian.Uint16(q[0:2]))
		a1 += uint64(binary.LittleEndian.Uint16(q[2:4]))
		a2 += uint64(binary.LittleEndian.Uint16(q[4:6]))
		a3 += uint64(binary.LittleEndian.Uint16(q[6:8]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 8)
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+2 <= len(p); i += 2 {
		x := uint64(binary.LittleEndian.Uint16(p[i:]))
		A += x
		B += k * x
		k++
	}
	return A, B
}

// sumABMix is sumAB (len(p) a multiple of 8) plus the mix check of the
// pieces: H = sum over k of Mix(x_k ^ (key + k*MixGamma)), key being the
// first piece's (docs/spec.md §14).
func sumABMix(p []byte, key uint64) (A, B, H uint64) {
	g := MixGamma
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := (*[32]byte)(p[i : i+32])
		x0 := binary.LittleEndian.Uint64(q[0:8])
		x1 := binary.LittleEndian.Uint64(q[8:16])
		x2 := binary.LittleEndian.Uint64(q[16:24])
		x3 := binary.LittleEndian.Uint64(q[24:32])
		a0 += x0
		a1 += x1
		a2 += x2
		a3 += x3
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		H += Mix(x0^key) + Mix(x1^(key+g)) + Mix(x2^(key+2*g)) + Mix(x3^(key+3*g))
		key += 4 * g
	}
	m := uint64(i / 32)
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		A += x
		B += k * x
		H += Mix(x ^ key)
		key += g
		k++
	}
	return A, B, H
}

// mixWords returns the mix check of the 8-byte words of p (len(p) a
// multiple of 8), the first word's key being key: sum over k of
// Mix(x_k ^ (key + k*MixGamma)).
func mixWords(p []byte, key uint64) (H uint64) {
	for i := 0; i+8 <= len(p); i += 8 {
		H += Mix(binary.LittleEndian.Uint64(p[i:]) ^ key)
		key += MixGamma
	}
	return H
}
