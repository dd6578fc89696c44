package ingress

import (
	"errors"
	"strconv"
	"time"
)

// ParseRFC3339 parses s strictly by the date-time grammar of RFC 3339 §5.6:
//
//	date-time = full-date "T" full-time            ; "T" and "Z" may be lower case
//	full-date = 4DIGIT "-" 2DIGIT "-" 2DIGIT
//	full-time = 2DIGIT ":" 2DIGIT ":" 2DIGIT [ "." 1*DIGIT ] ( "Z" / ( "+" / "-" ) 2DIGIT ":" 2DIGIT )
//
// with months 01–12, days valid for the month and year, hours 00–23, minutes 00–59,
// seconds 00–59 (a leap second, 60, is refused: Go's time cannot represent it) and
// offsets up to ±23:59. Fractions beyond nanoseconds are truncated. Neither
// time.Parse(time.RFC3339, …) nor Time.UnmarshalText is this strict: they accept a
// comma for the fraction, one-digit hours and offsets such as +24:01 (golang/go#54580).
func ParseRFC3339(s string) (time.Time, error) {
	p := rfcParser{s: s}
	year := p.digits(4)
	p.lit('-')
	month := p.digits(2)
	p.lit('-')
	day := p.digits(2)
	p.litFold('T')
	hour := p.digits(2)
	p.lit(':')
	minute := p.digits(2)
	p.lit(':')
	sec := p.digits(2)
	nsec := 0
	if p.peek('.') {
		p.lit('.')
		n := 0
		for scale := 100_000_000; p.more() && isDigit(p.s[p.i]); n++ {
			nsec += int(p.s[p.i]-'0') * scale
			scale /= 10
			p.i++
		}
		if n == 0 {
			p.fail("a '.' must be followed by at least one digit")
		}
	}
	var offset int
	switch {
	case p.peek('Z') || p.peek('z'):
		p.i++
	case p.peek('+') || p.peek('-'):
		sign := 1
		if p.s[p.i] == '-' {
			sign = -1
		}
		p.i++
		oh := p.digits(2)
		p.lit(':')
		om := p.digits(2)
		if p.err == nil && (oh > 23 || om > 59) {
			p.fail("the offset's hours must be 00–23 and its minutes 00–59")
		}
		offset = sign * (oh*3600 + om*60)
	default:
		p.fail("the time must end in Z or an offset ±hh:mm")
	}
	if p.err == nil && p.more() {
		p.fail("unexpected text after the offset")
	}
	if p.err != nil {
		return time.Time{}, p.err
	}
	switch {
	case month < 1 || month > 12:
		return time.Time{}, errors.New("the month must be 01–12")
	case hour > 23 || minute > 59 || sec > 59:
		return time.Time{}, errors.New("the hour must be 00–23, the minute and second 00–59")
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.FixedZone("", offset))
	if day < 1 || t.Day() != day {
		return time.Time{}, errors.New("the day does not exist in that month")
	}
	return t, nil
}

type rfcParser struct {
	s   string
	i   int
	err error
}

func (p *rfcParser) more() bool { return p.i < len(p.s) }

func (p *rfcParser) peek(c byte) bool { return p.err == nil && p.more() && p.s[p.i] == c }

func (p *rfcParser) fail(msg string) {
	if p.err == nil {
		p.err = errors.New(msg)
	}
}

func (p *rfcParser) digits(n int) int {
	v := 0
	for range n {
		if p.err != nil {
			return 0
		}
		if !p.more() || !isDigit(p.s[p.i]) {
			p.fail("expected a digit at byte " + strconv.Itoa(p.i) + " (every field has a fixed number of digits)")
			return 0
		}
		v = v*10 + int(p.s[p.i]-'0')
		p.i++
	}
	return v
}

func (p *rfcParser) lit(c byte) {
	if p.err != nil {
		return
	}
	if !p.more() || p.s[p.i] != c {
		p.fail("expected '" + string(c) + "' at byte " + strconv.Itoa(p.i))
		return
	}
	p.i++
}

func (p *rfcParser) litFold(c byte) {
	if p.peek(c + 'a' - 'A') {
		p.i++
		return
	}
	p.lit(c)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
