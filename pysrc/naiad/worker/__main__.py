from naiad.worker.main import main

raise SystemExit(main())
