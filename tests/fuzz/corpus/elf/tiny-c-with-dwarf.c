#include <stdlib.h>
static int helper(int x) { return x * 3; }
int main(int argc, char **argv) { void *p = malloc(16); free(p); return helper(argc); }
