from inferstack_gateway.cli import main

raise SystemExit(main())
