// Command static is the smallest static executable, for TestRun: the image
// builder checks that each binary is a static ELF for its architecture.
package main

func main() {}
