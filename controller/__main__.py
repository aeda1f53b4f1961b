from controller.app.cli import main

raise SystemExit(main())
