package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit"
)

func Example() {
	l, err := ratelimit.New(ratelimit.Config{}, []ratelimit.TenantLimit{
		{Tenant: "acme", Requests: 2, Interval: time.Minute},
	}, nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for range 3 {
		d, err := l.Take(context.Background(), "acme")
		fmt.Println(d.Allowed, d.Remaining, err)
	}
	// Output:
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}
