from dsinspect.cli import main

main()
