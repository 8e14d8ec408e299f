#include "tt_test.h"
TEST(placeholder) { TT_SKIP("pending"); }
TT_TEST_MAIN()
