from torchx_datapipes.runner.main import main

if __name__ == "__main__":
    main()
