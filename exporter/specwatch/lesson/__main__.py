from specwatch.lesson import main

raise SystemExit(main())
