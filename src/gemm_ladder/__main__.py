import sys

from gemm_ladder.cli import main

sys.exit(main())
